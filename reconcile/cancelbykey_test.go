package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"gateway/errs"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
	"gateway/review"
)

// Cancel-by-key (design §15) in each state its key can be in, against the
// fake PSP's ledger: whatever the key did or does, the money nets to zero
// and a late duplicate of the original request never charges.

func (e *env) cancelByKey(key, own string) (payments.Outcome, error) {
	return e.svc.CancelByKey(context.Background(), payments.CancelByKeyRequest{MerchantID: e.merch.ID, IdempotencyKey: own, Key: key})
}

func cancellation(t *testing.T, out payments.Outcome) payments.CancellationView {
	t.Helper()
	var v payments.CancellationView
	if err := json.Unmarshal(out.Response.Body, &v); err != nil {
		t.Fatalf("%s: %v", out.Response.Body, err)
	}
	return v
}

// net is what the PSP's ledger kept of an order: charged (captured) less refunded.
func (e *env) net(order string) int64 {
	var n int64
	for _, c := range e.psp.Charges() {
		if c.MerchantOrderID == order && c.Status == psp.Succeeded {
			n += c.Amount
			if c.AmountCaptured > 0 {
				n += c.AmountCaptured - c.Amount
			}
		}
	}
	for _, r := range e.psp.Refunds() {
		if r.MerchantOrderID == order && r.Status != psp.RefundDeclined {
			n -= r.Amount
		}
	}
	return n
}

func (e *env) withCanceler(c *reconcile.Config) { c.Canceler = e.svc }

// Nothing claimed the key yet: the key is stored canceled, and the
// original request arriving late (with any body) replays the cancellation
// and never charges.
func TestCancelByKeyBeforeTheRequest(t *testing.T) {
	e := newEnv(t)
	out, err := e.cancelByKey("late", "c1")
	if err != nil || out.Response.Status != http.StatusOK {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	if v := cancellation(t, out); v.Status != payments.CancellationCanceled || v.Payment != nil {
		t.Fatalf("answer %+v", v)
	}
	for _, amount := range []int64{1000, 2000} {
		req := e.request("late")
		req.Amount.Minor = amount
		if _, err := e.svc.Create(context.Background(), req); errs.CodeOf(err) != errs.CodeCanceledByKey {
			t.Fatalf("late duplicate (%d): %v", amount, err)
		}
	}
	if e.psp.ChargeCalls() != 0 || e.count(`SELECT COUNT(*) FROM payments`) != 0 {
		t.Fatal("the late request charged or stored a payment")
	}
	again, err := e.cancelByKey("late", "c1")
	if err != nil || !again.Replayed || !bytes.Equal(again.Response.Body, out.Response.Body) {
		t.Fatalf("replay: %+v %v", again, err)
	}
	if _, err := e.cancelByKey("late", "c2"); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("a second cancellation of the key: %v", err)
	}
	// The purge keeps the canceled key past its retention.
	e.advance(payments.DefaultRetention + time.Hour)
	runOnce(t, e.reconciler(nil, nil))
	if _, err := e.svc.Create(context.Background(), e.request("late")); errs.CodeOf(err) != errs.CodeCanceledByKey {
		t.Fatalf("late duplicate after the retention: %v", err)
	}
}

// Claimed, every send proven not sent, its lease over: canceled at once;
// its charge can never be sent; the retry replays the canceled payment.
func TestCancelByKeyNothingSent(t *testing.T) {
	e := newEnv(t)
	e.psp.FailNextCharges(fake.FaultNotProcessed, 1)
	if _, err := e.svc.Create(context.Background(), e.request("k")); errs.CodeOf(err) != errs.CodePSPUnavailable {
		t.Fatalf("create: %v", err)
	}
	out, err := e.cancelByKey("k", "c")
	if err != nil || out.Response.Status != http.StatusOK {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	v := cancellation(t, out)
	if v.Status != payments.CancellationCanceled || v.Payment == nil || v.Payment.Status != payments.Canceled {
		t.Fatalf("answer %+v", v)
	}
	retry, err := e.svc.Create(context.Background(), e.request("k"))
	if err != nil || !retry.Replayed || retry.Response.Status != http.StatusPaymentRequired {
		t.Fatalf("retry: %+v %v", retry, err)
	}
	e.advance(lease + creationWindow)
	runOnce(t, e.reconciler(nil, nil, e.withCanceler))
	if e.psp.ChargeCount() != 0 {
		t.Fatalf("%d charges at the PSP", e.psp.ChargeCount())
	}
}

// The charge's outcome unknown (it landed, the answer was lost): the
// cancellation is requested, and the reconciler settles the payment and
// refunds it: the ledger nets to zero and the cancellation's key replays
// what was done.
func TestCancelByKeyUnknownOutcome(t *testing.T) {
	e := newEnv(t)
	e.psp.FailNextCharges(fake.FaultUnknownAfterCharge, 1)
	if _, err := e.svc.Create(context.Background(), e.request("k")); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("create: %v", err)
	}
	out, err := e.cancelByKey("k", "c")
	if err != nil || out.Response.Status != http.StatusAccepted || cancellation(t, out).Status != payments.CancellationRequested {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	e.advance(lease + time.Second)
	runOnce(t, e.reconciler(nil, nil, e.withCanceler))
	order := payments.MerchantOrderID(e.merch.ID, "k")
	if n := e.net(order); n != 0 || e.psp.ChargeCount() != 1 {
		t.Fatalf("the ledger nets %d with %d charges, want 0 and 1", n, e.psp.ChargeCount())
	}
	again, err := e.cancelByKey("k", "c")
	if err != nil || !again.Replayed || again.Response.Status != http.StatusOK || cancellation(t, again).Status != payments.CancellationRefunded {
		t.Fatalf("the cancellation's replay: %d %s %v", again.Response.Status, again.Response.Body, err)
	}
}

// A charge in flight when the cancellation is recorded lands after it: the
// payment settles succeeded and the cancellation refunds it.
func TestCancelByKeyChargeLandsAfter(t *testing.T) {
	e := newEnv(t)
	sent, land := make(chan struct{}), make(chan struct{})
	e.psp.SetChargeHook(func(context.Context, psp.ChargeRequest) { close(sent); <-land })
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Create(context.Background(), e.request("k"))
		done <- err
	}()
	<-sent
	out, err := e.cancelByKey("k", "c")
	if err != nil || out.Response.Status != http.StatusAccepted {
		t.Fatalf("cancel while in flight: %+v %v", out, err)
	}
	close(land)
	if err := <-done; err != nil {
		t.Fatalf("the charge: %v", err)
	}
	runOnce(t, e.reconciler(nil, nil, e.withCanceler))
	if n := e.net(payments.MerchantOrderID(e.merch.ID, "k")); n != 0 {
		t.Fatalf("the ledger nets %d, want 0", n)
	}
}

// Settled already: a payment that took money is refunded in full, an
// authorization voided, one awaiting its confirmation canceled, one that
// charged nothing left as it is; each at once, in the request.
func TestCancelByKeySettled(t *testing.T) {
	e := newEnv(t)
	paid := e.paid("paid", 1000)
	out, err := e.cancelByKey("paid", "c-paid")
	if v := cancellation(t, out); err != nil || v.Status != payments.CancellationRefunded || v.RefundID == nil {
		t.Fatalf("succeeded: %s %v", out.Response.Body, err)
	}
	if n := e.net(paid.MerchantOrderID); n != 0 {
		t.Fatalf("the refunded payment nets %d", n)
	}
	auth := e.authorized("auth", 1000)
	out, err = e.cancelByKey("auth", "c-auth")
	if v := cancellation(t, out); err != nil || v.Status != payments.CancellationVoided || len(e.psp.Voids()) != 1 {
		t.Fatalf("authorized: %s %v", out.Response.Body, err)
	}
	if got := e.reread(auth); got.Status != payments.Canceled {
		t.Fatalf("authorization %+v", got)
	}
	req := e.request("later")
	req.ConfirmLater, req.PaymentMethod = true, ""
	if _, err := e.svc.Create(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	out, err = e.cancelByKey("later", "c-later")
	if v := cancellation(t, out); err != nil || v.Status != payments.CancellationCanceled || v.Payment.Status != payments.Canceled {
		t.Fatalf("unconfirmed: %s %v", out.Response.Body, err)
	}
	declined := e.request("declined")
	declined.PaymentMethod = fake.MethodDeclined
	if _, err := e.svc.Create(context.Background(), declined); err != nil {
		t.Fatal(err)
	}
	out, err = e.cancelByKey("declined", "c-declined")
	if v := cancellation(t, out); err != nil || v.Status != payments.CancellationCanceled || v.Payment.Status != payments.Declined {
		t.Fatalf("declined: %s %v", out.Response.Body, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM key_cancellations WHERE status = 'cancel_requested'`); n != 0 {
		t.Fatalf("%d cancellations left requested", n)
	}
}

// A cancellation whose void the reconciler proves never sent (its key then
// answers 402 for ever) voids with the next derived key, instead of
// waiting for the authorization to lapse.
func TestCancelByKeyVoidsAgainAfterAVoidNeverSent(t *testing.T) {
	e := newEnv(t)
	auth := e.authorized("auth", 1000)
	e.psp.FailNextVoids(fake.FaultNotProcessed, 1)
	out, err := e.cancelByKey("auth", "c")
	if err != nil || cancellation(t, out).Status != payments.CancellationRequested {
		t.Fatalf("cancel: %s %v", out.Response.Body, err)
	}
	e.advance(lease + time.Second)
	runOnce(t, e.reconciler(nil, nil, e.withCanceler))
	if got := e.reread(auth); got.Status != payments.Canceled || len(e.psp.Voids()) != 1 {
		t.Fatalf("payment %s with %d voids, want canceled by one", got.Status, len(e.psp.Voids()))
	}
	again, err := e.cancelByKey("auth", "c")
	if err != nil || cancellation(t, again).Status != payments.CancellationVoided {
		t.Fatalf("the cancellation's replay: %s %v", again.Response.Body, err)
	}
}

// Once a cancellation of a key in progress is requested, a retry of the
// original request never sends its charge again: it only looks up, and a
// charge that never left is settled failed by the reconciler, the
// cancellation then done with nothing charged. Before, the retry sent the
// charge and answered 201, and the cancellation refunded it.
func TestARequestedCancellationStopsEveryLaterSend(t *testing.T) {
	e := newEnv(t)
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	if _, err := e.svc.Create(context.Background(), e.request("k")); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("create: %v", err)
	}
	if out, err := e.cancelByKey("k", "c"); err != nil || cancellation(t, out).Status != payments.CancellationRequested {
		t.Fatalf("cancel: %s %v", out.Response.Body, err)
	}
	e.advance(lease + time.Second)
	if _, err := e.svc.Create(context.Background(), e.request("k")); err == nil {
		t.Fatal("the retry after the cancellation was answered")
	}
	if e.psp.ChargeCount() != 0 || e.psp.ChargeCalls() != 1 {
		t.Fatalf("%d charges in %d calls: the retry sent the charge again", e.psp.ChargeCount(), e.psp.ChargeCalls())
	}
	for range 3 {
		e.advance(creationWindow + lease)
		runOnce(t, e.reconciler(nil, nil, e.withCanceler))
	}
	again, err := e.cancelByKey("k", "c")
	if err != nil || cancellation(t, again).Status != payments.CancellationCanceled || e.psp.ChargeCount() != 0 {
		t.Fatalf("the cancellation: %s %v, %d charges", again.Response.Body, err, e.psp.ChargeCount())
	}
}

// A payment with a refund of the merchant's own in flight when its key is
// canceled is refunded of the rest at once, and, once that refund proves
// never sent (its reservation released), of the rest again: the
// cancellation ends refunded in full, never with money kept. Before, it
// ended "refunded in full" with the first refund's remainder only.
func TestCancelByKeyRefundsWhatAPendingRefundReleases(t *testing.T) {
	e := newEnv(t)
	p := e.paid("paid", 1000)
	e.psp.FailNextRefunds(fake.FaultUnknownBeforeCharge, 1)
	if _, err := e.refund(p, "own", amt(300)); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("the merchant's refund: %v", err)
	}
	out, err := e.cancelByKey("paid", "c")
	if err != nil || cancellation(t, out).Status != payments.CancellationRequested {
		t.Fatalf("cancel: %s %v", out.Response.Body, err)
	}
	if got := e.reread(p); got.AmountRefunded != 700 {
		t.Fatalf("refunded %d at once, want the 700 no refund held", got.AmountRefunded)
	}
	for range 4 {
		e.advance(creationWindow + lease)
		runOnce(t, e.reconciler(nil, nil, e.withCanceler))
	}
	if got := e.reread(p); got.AmountRefunded != 1000 || e.net(p.MerchantOrderID) != 0 {
		t.Fatalf("refunded %d, the ledger nets %d; want 1000 and 0", got.AmountRefunded, e.net(p.MerchantOrderID))
	}
	again, err := e.cancelByKey("paid", "c")
	if err != nil || cancellation(t, again).Status != payments.CancellationRefunded {
		t.Fatalf("the cancellation: %s %v", again.Response.Body, err)
	}
}

// A cancellation that ended "nothing charged" is carried out again when
// its payment turns out to hold money after all (an operator's correction
// here; a PSP contradicting the answer likewise). Before, it stayed ended
// and nothing gave the money back.
func TestAnEndedCancellationReopensWhenItsPaymentHoldsMoney(t *testing.T) {
	e := newEnv(t)
	declined := e.request("declined")
	declined.PaymentMethod = fake.MethodDeclined
	created, err := e.svc.Create(context.Background(), declined)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e.cancelByKey("declined", "c"); err != nil || cancellation(t, out).Status != payments.CancellationCanceled {
		t.Fatalf("cancel: %s %v", out.Response.Body, err)
	}
	adm := review.New(e.store, review.Config{PSPs: payments.OnePSP(e.psp)})
	if _, err := adm.Resolve(context.Background(), payments.Resolution{PaymentID: created.SubjectID, To: payments.Succeeded,
		Reason: "the bank says it was paid", Actor: "ops", Force: true}); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT COUNT(*) FROM key_cancellations WHERE status = 'cancel_requested' AND due_at <= NOW(6)`); n != 1 {
		t.Fatal("the ended cancellation was not reopened")
	}
	runOnce(t, e.reconciler(nil, nil, e.withCanceler))
	if n := e.count(`SELECT COUNT(*) FROM refunds WHERE payment_id = ?`, created.SubjectID); n == 0 {
		t.Fatal("the reopened cancellation made no refund")
	}
}
