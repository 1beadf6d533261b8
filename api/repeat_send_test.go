package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
)

// A repeat send the PSP refuses as invalid says nothing about the first send
// of the same order id, whose answer was lost: the payment is not failed, the
// key is given back counting the repeat as not sent, and the lookups decide.
func TestRejectedRepeatSendIsNotFinal(t *testing.T) {
	e := newEnv(t)
	body := strings.Replace(okBody, "pm_card_ok", fake.MethodInvalidRequest, 1)
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	wantProblem(t, e.post("k", body), http.StatusBadGateway, "psp-outcome-unknown")
	// The retry looks up (not found), arms a second send, and the PSP
	// refuses that one: only the first could have charged, and nobody knows.
	wantProblem(t, e.post("k", body), http.StatusBadGateway, "psp-outcome-unknown")
	var row struct {
		State    string `db:"state"`
		Attempts int    `db:"send_attempts"`
		NotSent  int    `db:"sends_not_sent"`
		Status   string `db:"status"`
	}
	if err := e.db.Get(&row, `SELECT k.state, k.send_attempts, k.sends_not_sent, p.status
FROM idempotency_keys k JOIN payments p ON p.id = k.subject_id`); err != nil {
		t.Fatal(err)
	}
	if row.State != "IN_PROGRESS" || row.Status == string(payments.Failed) || row.Attempts != 2 || row.NotSent != 1 {
		t.Fatalf("after a refused repeat: %+v, want IN_PROGRESS, not failed, 2 attempts, 1 not sent", row)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 0, charges: 0, chargeCalls: 2})
}

// A repeat refund the PSP declines is not proof either: the PSP keeps no
// record of a declined refund, so the first send may still be applied. The
// refund stays pending and keeps its reservation.
func TestDeclinedRepeatRefundIsNotFinal(t *testing.T) {
	e := newEnv(t)
	pay := decodeView(t, e.post("p", okBody).body) // 1000 KRW
	path := "/payments/" + pay.ID + "/refunds"
	refund := func(key, body string) response {
		t.Helper()
		res, err := e.do(t.Context(), http.MethodPost, path, e.apiKey, map[string]string{"Idempotency-Key": key}, body)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	e.psp.FailNextRefunds(fake.FaultUnknownBeforeCharge, 1)
	wantProblem(t, refund("r1", `{"amount": 300}`), http.StatusBadGateway, "psp-outcome-unknown")
	// Meanwhile the charge is refunded in full at the PSP, so a repeat send
	// of r1 is declined (amount exceeded).
	if _, err := e.psp.Refund(t.Context(), psp.RefundRequest{RefundOrderID: "elsewhere", MerchantOrderID: pay.MerchantOrderID,
		ChargeReference: *pay.PSPReference, Amount: 1000, Currency: "KRW"}); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, refund("r1", `{"amount": 300}`), http.StatusBadGateway, "psp-outcome-unknown")
	var row struct {
		Status   string `db:"status"`
		Reserved int64  `db:"amount_reserved"`
		Attempts int    `db:"send_attempts"`
		NotSent  int    `db:"sends_not_sent"`
	}
	if err := e.db.Get(&row, `SELECT r.status, p.amount_reserved, k.send_attempts, k.sends_not_sent
FROM refunds r JOIN payments p ON p.id = r.payment_id JOIN idempotency_keys k ON k.subject_id = r.id`); err != nil {
		t.Fatal(err)
	}
	if row.Status == string(payments.RefundFailed) || row.Reserved != 300 || row.Attempts != 2 || row.NotSent != 1 {
		t.Fatalf("after a declined repeat: %+v, want not failed, 300 reserved, 2 attempts, 1 not sent", row)
	}
}

// ArmCharge judges its guard on the database's clock in the same statement
// as it counts the attempt: refused, it writes nothing; a token not the
// holder's is fenced whatever the guard.
func TestArmChargeGuard(t *testing.T) {
	e := newEnv(t)
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	wantStatus(t, e.post("k", okBody), http.StatusBadGateway)
	ref := idemkeys.Ref{MerchantID: e.merch.ID, Endpoint: payments.EndpointCreatePayment, Key: "k"}
	ctx := context.Background()
	rec, err := e.store.Record(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	token, err := e.store.TakeOver(ctx, ref, rec.Token, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	attempts := func() int {
		t.Helper()
		r, err := e.store.Record(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		return r.SendAttempts
	}
	for _, g := range []payments.ArmGuard{
		{},                            // no dedupe, not authoritative
		{DedupeAge: time.Microsecond}, // the key is older than the dedupe memory allows
		{Authoritative: true, LateAfter: time.Hour}, // the last send's creation window is still open
	} {
		if err := e.store.ArmSend(ctx, ref, token, time.Minute, g); !errors.Is(err, payments.ErrArmRefused) {
			t.Fatalf("guard %+v: %v, want ErrArmRefused", g, err)
		}
	}
	if n := attempts(); n != 1 {
		t.Fatalf("refused arms counted: %d attempts", n)
	}
	if err := e.store.ArmSend(ctx, ref, rec.Token, time.Minute, payments.ArmGuard{Forever: true}); !errors.Is(err, idemkeys.ErrFenced) {
		t.Fatalf("arm with the old token: %v, want ErrFenced", err)
	}
	if err := e.store.ArmSend(ctx, ref, token, time.Minute, payments.ArmGuard{DedupeAge: time.Hour}); err != nil {
		t.Fatalf("arm inside the dedupe memory: %v", err)
	}
	if err := e.store.ArmSend(ctx, ref, token, time.Minute, payments.ArmGuard{Forever: true}); err != nil {
		t.Fatalf("arm with a PSP that dedupes for ever: %v", err)
	}
	if n := attempts(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}
