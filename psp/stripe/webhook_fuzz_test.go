package stripe_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/stripe/stripe-go/v82"

	"gateway/psp"
	"gateway/psp/stripe"
	"gateway/psp/stripe/stripetest"
)

// fuzzNow is the fuzz targets' time now, on the adapter's clock.
var fuzzNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fuzzStripe is a Stripe adapter with webhooks over the fake, its clock
// at fuzzNow, holding a succeeded and a refunded PaymentIntent; events are
// notifications about them.
func fuzzStripe(f *testing.F) (a *stripe.Adapter, fake *stripetest.Server, events [][]byte) {
	fake = stripetest.New(key)
	ts := httptest.NewServer(fake)
	f.Cleanup(ts.Close)
	a, err := stripe.New(stripe.Config{SecretKey: key, BaseURL: ts.URL, WebhookSecret: whsec, Now: func() time.Time { return fuzzNow }})
	if err != nil {
		f.Fatal(err)
	}
	c, err := a.Charge(f.Context(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000f01", Amount: 1500, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil {
		f.Fatal(err)
	}
	r, err := a.Charge(f.Context(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000f02", Amount: 5000, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := a.Refund(f.Context(), psp.RefundRequest{RefundOrderID: "rfd_000000000000000000000f02", MerchantOrderID: "ord_000000000000000000000f02",
		ChargeReference: r.Reference, Amount: 2000, Currency: "USD"}); err != nil {
		f.Fatal(err)
	}
	return a, fake, [][]byte{fake.Event("payment_intent.succeeded", c.Reference), fake.Event("charge.refunded", r.Reference)}
}

// FuzzStripeSignedBody: a notification is read only as it was signed. A
// body altered after signing, however little (a byte, a space, a field
// moved), is refused as unverified before Stripe is asked anything; the
// body as signed is refused only when it is no Stripe event at all.
func FuzzStripeSignedBody(f *testing.F) {
	a, fake, events := fuzzStripe(f)
	for _, ev := range events {
		f.Add(ev, uint16(0), uint8(0), []byte{})
		f.Add(ev, uint16(len(ev)-1), uint8(0), []byte(" "))
		f.Add(ev, uint16(bytes.Index(ev, []byte(`"succeeded"`))+1), uint8(9), []byte("canceled"))
		f.Add(ev, uint16(1), uint8(0), []byte(`"id":"evt_x",`))
	}
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"object":"payment_intent","id":"pi_1"}}}`), uint16(0), uint8(0), []byte{})
	f.Add([]byte(`not json`), uint16(0), uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, body []byte, at uint16, cut uint8, insert []byte) {
		i := int(at) % (len(body) + 1)
		j := min(i+int(cut), len(body))
		altered := append(append(append([]byte{}, body[:i]...), insert...), body[j:]...)
		header := signed(body, whsec, fuzzNow)
		before := len(fake.Requests())
		_, err := a.ReadNotice(t.Context(), header, altered)
		if !bytes.Equal(altered, body) {
			if !errors.Is(err, psp.ErrUnverified) {
				t.Fatalf("a body altered after signing (%q for %q) was read: %v", altered, body, err)
			}
			if n := len(fake.Requests()) - before; n != 0 {
				t.Fatalf("an altered body made %d requests to Stripe", n)
			}
			return
		}
		if errors.Is(err, psp.ErrUnverified) && json.Unmarshal(body, &sdk.Event{}) == nil {
			t.Fatalf("an event signed with the secret is refused as unverified: %v\n%s", err, body)
		}
	})
}

// FuzzStripeSignatureHeader: whatever the Stripe-Signature header holds,
// a notification is read only when the header carries, for a timestamp it
// names within five minutes of now, the body's HMAC-SHA256 under the
// endpoint's secret; any other header is refused before Stripe is asked
// anything. In the fuzzed header, {t} stands for the time now and {v1}
// for the body's signature at that time; {t+1h}, {v1+1h}, {t-1h} and
// {v1-1h} for an hour later and earlier.
func FuzzStripeSignatureHeader(f *testing.F) {
	a, fake, events := fuzzStripe(f)
	for _, h := range []string{
		"t={t},v1={v1}", "t={t},v1={v1},v0=00", "t={t+1h},v1={v1+1h}", "t={t-1h},v1={v1-1h}",
		"t={t},t={t+1h},v1={v1+1h}", "t={t+1h},t={t},v1={v1+1h},v1={v1}", "t={t},v1=00,v1={v1}", "v1={v1},t={t}", "t={t}, v1={v1}",
		"t={t},v1={V1}", "t=0,v1={v1}", "t={t},t=0,v1={v1}", "t=0,t={t},v1={v1}", "t={t},v1={v1}x", "t={t}",
		"t={t},v1=", "t={t},v1={v1},=", "t={t}=,v1={v1}", "", "t=-{t},v1={v1}", "t=+{t},v1={v1}", "t=0{t},v1={v1}",
	} {
		f.Add(h, uint8(0))
		f.Add(h, uint8(1))
	}
	f.Fuzz(func(t *testing.T, template string, which uint8) {
		body := events[int(which)%len(events)]
		stamp := func(d time.Duration) (string, string) {
			ts := strconv.FormatInt(fuzzNow.Add(d).Unix(), 10)
			return ts, hex.EncodeToString(signature(ts, body))
		}
		ts, sig := stamp(0)
		later, laterSig := stamp(time.Hour)
		earlier, earlierSig := stamp(-time.Hour)
		header := strings.NewReplacer("{t}", ts, "{v1}", sig, "{V1}", strings.ToUpper(sig),
			"{t+1h}", later, "{v1+1h}", laterSig, "{t-1h}", earlier, "{v1-1h}", earlierSig).Replace(template)
		before := len(fake.Requests())
		_, err := a.ReadNotice(t.Context(), http.Header{"Stripe-Signature": {header}}, body)
		if err == nil || !errors.Is(err, psp.ErrUnverified) {
			if !carriesSignature(header, body, fuzzNow) {
				t.Fatalf("header %q verified, though it carries no fresh signature of the body (%v)", header, err)
			}
			return
		}
		if n := len(fake.Requests()) - before; n != 0 {
			t.Fatalf("header %q was refused after %d requests to Stripe", header, n)
		}
	})
}

// signature is Stripe's v1 signature of body at the Unix time ts.
func signature(ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(whsec))
	m.Write([]byte(ts + "." + string(body)))
	return m.Sum(nil)
}

// carriesSignature reports whether header names a timestamp within five
// minutes of now (in any decimal spelling: 0042 is 42) and, among its v1
// values, the body's signature at it.
func carriesSignature(header string, body []byte, now time.Time) bool {
	var stamps []string
	var sigs [][]byte
	for _, pair := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(pair, "=")
		switch k {
		case "t":
			stamps = append(stamps, v)
		case "v1":
			if s, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, s)
			}
		}
	}
	for _, ts := range stamps {
		at, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || at < now.Unix()-300 || at > now.Unix()+300 {
			continue
		}
		for _, s := range sigs {
			if hmac.Equal(s, signature(strconv.FormatInt(at, 10), body)) {
				return true
			}
		}
	}
	return false
}
