package api_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// A request the PSP refuses as invalid is a final answer: 402 failed,
// stored and replayed, never a 503 loop and never a payment in review.
func TestRejectedRequestIsAFinalFailure(t *testing.T) {
	e := newEnv(t)
	body := strings.Replace(okBody, "pm_card_ok", fake.MethodInvalidRequest, 1)
	res := e.post("k", body)
	wantStatus(t, res, http.StatusPaymentRequired)
	if v := decodeView(t, res.body); v.Status != payments.Failed || v.DeclineCode == nil || *v.DeclineCode != payments.DeclineRejected {
		t.Fatalf("answer %s", res.body)
	}
	again := e.post("k", body)
	if again.status != http.StatusPaymentRequired || !bytes.Equal(again.body, res.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s", again.status, again.body)
	}
	var code string
	if err := e.db.Get(&code, `SELECT psp_code FROM payments`); err != nil || code == "" {
		t.Fatalf("the PSP's own code was not kept: %q %v", code, err)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 0, chargeCalls: 1})
}

// A payment the configured PSP can never accept is refused before anything
// is stored or sent, naming the field; the key stays free.
func TestPaymentThePSPCannotAcceptIsRefusedFirst(t *testing.T) {
	e := newEnv(t)
	taken := map[string]bool{}
	for _, c := range fake.Currencies() {
		taken[c.Code] = true
	}
	var refused string
	for _, c := range []string{"AFN", "ALL", "AMD", "AOA", "BAM", "BDT", "BTN", "CUP", "ERN", "GMD", "KPW", "MMK", "SDG", "SYP", "XAF", "XOF"} {
		if _, iso := payments.CurrencyExponent(c); iso && !taken[c] {
			refused = c
			break
		}
	}
	if refused == "" {
		t.Skip("the fake PSP takes every currency tried")
	}
	res := e.post("k", strings.Replace(okBody, `"KRW"`, `"`+refused+`"`, 1))
	wantProblem(t, res, http.StatusUnprocessableEntity, "psp-cannot-accept")
	if !bytes.Contains(res.body, []byte(`"field":"currency"`)) {
		t.Fatalf("the problem does not name the field: %s", res.body)
	}
	e.wantCounts(counts{})
	wantStatus(t, e.post("k", okBody), http.StatusCreated) // the key was not used up
}

// A charge the PSP accepted and keeps waiting on (a virtual account before
// its deposit) is answered 202 processing and not stored; once the PSP
// settles it, the reconciler records it and the key replays the outcome.
func TestPendingChargeSettlesLater(t *testing.T) {
	e := newEnv(t)
	body := strings.Replace(okBody, "pm_card_ok", fake.MethodVirtualAccount, 1)
	res := e.post("k", body)
	wantStatus(t, res, http.StatusAccepted)
	v := decodeView(t, res.body)
	if v.Status != payments.Processing || res.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("answer %s", res.body)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 0, charges: 1, chargeCalls: 1})
	e.advance(31 * time.Second)
	r := reconcile.New(e.store, payments.OnePSP(e.psp), reconcile.Config{Lease: 30 * time.Second, PSPTimeout: time.Second, Now: e.clock.Now})
	sum, err := r.RunOnce(context.Background())
	if err != nil || sum.Counts[reconcile.Deferred] != 1 {
		t.Fatalf("pending at the PSP: %+v %v", sum.Counts, err)
	}
	if _, err := e.psp.Settle(v.MerchantOrderID, psp.Succeeded, ""); err != nil {
		t.Fatal(err)
	}
	e.advance(2 * time.Minute)
	sum, err = r.RunOnce(context.Background())
	if err != nil || sum.Counts[reconcile.Succeeded] != 1 {
		t.Fatalf("after the deposit: %+v %v", sum.Counts, err)
	}
	wantStatus(t, e.post("k", body), http.StatusCreated)
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}
