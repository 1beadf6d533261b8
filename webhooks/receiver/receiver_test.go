package receiver_test

import (
	"errors"
	"testing"
	"time"

	"gateway/webhooks"
	"gateway/webhooks/receiver"
)

func TestVerify(t *testing.T) {
	const (
		oldSecret = "whsec_old"
		newSecret = "whsec_new"
	)
	body := []byte(`{"id":"evt_1","type":"payment.succeeded"}`)
	now := time.Unix(1_800_000_000, 0)
	signed := func(at time.Time, secrets ...string) string { return webhooks.SignatureValue(secrets, at, body) }
	for _, c := range []struct {
		name    string
		header  string
		body    []byte
		secrets []string
		want    error
	}{
		{"valid", signed(now, newSecret), body, []string{newSecret}, nil},
		{"valid, signed a little in the past", signed(now.Add(-4*time.Minute), newSecret), body, []string{newSecret}, nil},
		{"tampered body", signed(now, newSecret), []byte(`{"id":"evt_1","type":"payment.failed"}`), []string{newSecret}, receiver.ErrNoMatch},
		{"wrong secret", signed(now, newSecret), body, []string{"whsec_other"}, receiver.ErrNoMatch},
		{"expired timestamp", signed(now.Add(-6*time.Minute), newSecret), body, []string{newSecret}, receiver.ErrTooOld},
		{"timestamp from the future", signed(now.Add(6*time.Minute), newSecret), body, []string{newSecret}, receiver.ErrTooOld},
		{"rotation grace: both signatures, the receiver still knows only the old secret", signed(now, newSecret, oldSecret), body, []string{oldSecret}, nil},
		{"rotation grace: both signatures, the receiver knows only the new secret", signed(now, newSecret, oldSecret), body, []string{newSecret}, nil},
		{"receiver rotating: it tries both of its secrets", signed(now, newSecret), body, []string{oldSecret, newSecret}, nil},
		{"after the grace: the old secret alone no longer matches", signed(now, newSecret), body, []string{oldSecret}, receiver.ErrNoMatch},
		{"no timestamp", "v1=00", body, []string{newSecret}, receiver.ErrMalformed},
		{"two timestamps", "t=1,t=2,v1=00", body, []string{newSecret}, receiver.ErrMalformed},
		{"no signature", "t=1800000000", body, []string{newSecret}, receiver.ErrNoMatch},
		{"garbage", "hello", body, []string{newSecret}, receiver.ErrMalformed},
		{"no secret", signed(now, newSecret), body, nil, receiver.ErrNoSecret},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := receiver.Verify(c.header, c.body, c.secrets, 5*time.Minute, now)
			if !errors.Is(err, c.want) {
				t.Fatalf("Verify(%q) = %v, want %v", c.header, err, c.want)
			}
		})
	}
}

// A signature is over the timestamp too: moving t invalidates it.
func TestVerifyTimestampIsSigned(t *testing.T) {
	body := []byte(`{}`)
	now := time.Unix(1_800_000_000, 0)
	sig := webhooks.Signature("whsec_x", now.Unix(), body)
	forged := "t=1800000001,v1=" + sig
	if err := receiver.Verify(forged, body, []string{"whsec_x"}, time.Minute, now); !errors.Is(err, receiver.ErrNoMatch) {
		t.Fatalf("a moved timestamp verified: %v", err)
	}
}
