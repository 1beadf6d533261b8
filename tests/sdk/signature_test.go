package sdk_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"gateway/clients/go/webhook"
	"gateway/webhooks"
	"gateway/webhooks/receiver"
)

// verdict names a verification's outcome the same way for the gateway's
// receiver package and the client's webhook package.
func verdict(err error) string {
	for _, e := range []struct {
		name         string
		theirs, ours error
	}{
		{"malformed", receiver.ErrMalformed, webhook.ErrMalformed},
		{"no match", receiver.ErrNoMatch, webhook.ErrNoMatch},
		{"too old", receiver.ErrTooOld, webhook.ErrTooOld},
		{"no secret", receiver.ErrNoSecret, webhook.ErrNoSecret},
	} {
		if errors.Is(err, e.theirs) || errors.Is(err, e.ours) {
			return e.name
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "ok"
}

// agree verifies one delivery with both and fails when they differ.
func agree(t *testing.T, header string, body []byte, secrets []string, now time.Time) string {
	t.Helper()
	theirs := verdict(receiver.Verify(header, body, secrets, 5*time.Minute, now))
	ours := verdict(webhook.VerifyAt(body, header, secrets, 5*time.Minute, now))
	if theirs != ours {
		t.Fatalf("header %q, body %q, secrets %q: the gateway's receiver says %s, the client says %s", header, body, secrets, theirs, ours)
	}
	return ours
}

// TestSignaturesAgree signs deliveries with the gateway's own signer
// (webhooks.SignatureValue, what the dispatcher sends) and checks that the
// client's webhook.Verify accepts and refuses exactly what the gateway's
// receiver package does, so the copy cannot drift from the original.
func TestSignaturesAgree(t *testing.T) {
	const oldSecret, newSecret = "whsec_old", "whsec_new"
	body := []byte(`{"id":"evt_01M8SVRZDNX7KSX4YEP34TX2JZ","type":"payment.succeeded"}`)
	now := time.Unix(1_800_000_000, 0)
	signed := func(at time.Time, secrets ...string) string { return webhooks.SignatureValue(secrets, at, body) }
	v1 := webhooks.Signature(newSecret, now.Unix(), body)
	for _, c := range []struct {
		name    string
		header  string
		body    []byte
		secrets []string
		want    string
	}{
		{"valid", signed(now, newSecret), body, []string{newSecret}, "ok"},
		{"at the edge of the tolerance", signed(now.Add(-5*time.Minute), newSecret), body, []string{newSecret}, "ok"},
		{"past the tolerance", signed(now.Add(-5*time.Minute-time.Second), newSecret), body, []string{newSecret}, "too old"},
		{"from the future", signed(now.Add(6*time.Minute), newSecret), body, []string{newSecret}, "too old"},
		{"a rotation's two signatures, the old secret known", signed(now, newSecret, oldSecret), body, []string{oldSecret}, "ok"},
		{"a receiver trying both secrets", signed(now, newSecret), body, []string{oldSecret, newSecret}, "ok"},
		{"another secret", signed(now, newSecret), body, []string{oldSecret}, "no match"},
		{"a tampered body", signed(now, newSecret), []byte(`{}`), []string{newSecret}, "no match"},
		{"an empty body", webhooks.SignatureValue([]string{newSecret}, now, nil), nil, []string{newSecret}, "ok"},
		{"a moved timestamp", "t=" + strconv.FormatInt(now.Unix()+1, 10) + ",v1=" + v1, body, []string{newSecret}, "no match"},
		{"spaces around the parts", " t=" + strconv.FormatInt(now.Unix(), 10) + " , v1=" + v1 + " ", body, []string{newSecret}, "ok"},
		{"v1 before t", "v1=" + v1 + ",t=" + strconv.FormatInt(now.Unix(), 10), body, []string{newSecret}, "ok"},
		{"a v0 beside", "t=" + strconv.FormatInt(now.Unix(), 10) + ",v0=00,v1=" + v1, body, []string{newSecret}, "ok"},
		{"an upper-case v1", "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=" + strings.ToUpper(v1), body, []string{newSecret}, "ok"},
		{"a short v1", "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=" + v1[:62], body, []string{newSecret}, "no match"},
		{"no v1", "t=" + strconv.FormatInt(now.Unix(), 10), body, []string{newSecret}, "no match"},
		{"two timestamps", "t=1,t=2,v1=" + v1, body, []string{newSecret}, "malformed"},
		{"a timestamp in hex", "t=0x6b49d200,v1=" + v1, body, []string{newSecret}, "malformed"},
		{"a part without =", "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1", body, []string{newSecret}, "malformed"},
		{"empty", "", body, []string{newSecret}, "malformed"},
		{"no secret", signed(now, newSecret), body, nil, "no secret"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := agree(t, c.header, c.body, c.secrets, now); got != c.want {
				t.Fatalf("both say %s, want %s", got, c.want)
			}
		})
	}
}

// FuzzVerifyAgrees: for any header, body and secret, the client's
// verification and the gateway's receiver say the same.
func FuzzVerifyAgrees(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt_1"}`)
	f.Add(webhooks.SignatureValue([]string{"whsec_a"}, now, body), body, "whsec_a", int64(0))
	f.Add(webhooks.SignatureValue([]string{"whsec_a", "whsec_b"}, now, body), body, "whsec_b", int64(-299))
	f.Add("t=1800000000,v1=zz,v1="+webhooks.Signature("whsec_a", now.Unix(), body), body, "whsec_a", int64(301))
	f.Add("t=,v1=", []byte{}, "", int64(0))
	f.Fuzz(func(t *testing.T, header string, body []byte, secret string, skew int64) {
		if skew > 1<<40 || skew < -(1<<40) {
			return
		}
		agree(t, header, body, []string{secret}, now.Add(time.Duration(skew)*time.Second))
	})
}
