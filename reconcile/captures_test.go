package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
	"gateway/review"
)

// Manual capture (design §15), through the live flow and the reconciler,
// against the fake PSP's ledger and the database's rows.

// authorized is a manual-capture payment of amount, authorized.
func (e *env) authorized(key string, amount int64) payments.Payment {
	e.t.Helper()
	req := e.request(key)
	req.Amount.Minor, req.CaptureMethod = amount, payments.CaptureManual
	out, err := e.svc.Create(context.Background(), req)
	if err != nil || out.Response.Status != http.StatusCreated {
		e.t.Fatalf("authorize: %+v %v", out, err)
	}
	p, err := e.store.Payment(context.Background(), e.merch.ID, out.SubjectID)
	if err != nil || p.Status != payments.RequiresCapture {
		e.t.Fatalf("authorized payment %+v %v", p, err)
	}
	return p
}

func (e *env) capture(p payments.Payment, key string, amount *int64) (payments.Outcome, error) {
	return e.svc.Capture(context.Background(), payments.CaptureRequest{MerchantID: e.merch.ID, PaymentID: p.ID, IdempotencyKey: key, AmountToCapture: amount})
}

func (e *env) cancel(p payments.Payment, key, reason string) (payments.Outcome, error) {
	return e.svc.Cancel(context.Background(), payments.CancelRequest{MerchantID: e.merch.ID, PaymentID: p.ID, IdempotencyKey: key, Reason: reason})
}

func (e *env) reread(p payments.Payment) payments.Payment {
	e.t.Helper()
	got, err := e.store.Payment(context.Background(), e.merch.ID, p.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func view(t *testing.T, body []byte) payments.View {
	t.Helper()
	var v payments.View
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return v
}

// An authorization shows what it holds; a capture of part of it takes that
// part once (a replay answers the same bytes, another body with the key
// is a mismatch), releases the rest, and writes payment.partially_captured;
// refunds are bounded by what was captured.
func TestAuthorizeThenCapturePart(t *testing.T) {
	e := newEnv(t)
	p := e.authorized("auth", 1000)
	if v := payments.ToView(p); v.AmountCapturable == nil || *v.AmountCapturable != 1000 || v.CaptureBefore == nil || v.CaptureMethod != payments.CaptureManual {
		t.Fatalf("authorization view %+v", v)
	}
	if n := e.psp.ChargeCount(); n != 1 {
		t.Fatalf("%d charges at the PSP", n)
	}
	out, err := e.capture(p, "cap-1", amt(600))
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("capture: %+v %v", out, err)
	}
	v := view(t, out.Response.Body)
	if v.Status != payments.Succeeded || *v.AmountCaptured != 600 || *v.AmountCapturable != 0 {
		t.Fatalf("captured view %+v", v)
	}
	again, err := e.capture(p, "cap-1", amt(600))
	if err != nil || !again.Replayed || !bytes.Equal(again.Response.Body, out.Response.Body) {
		t.Fatalf("replay: %+v %v", again, err)
	}
	if _, err := e.capture(p, "cap-1", amt(500)); errs.CodeOf(err) != errs.CodeKeyMismatch {
		t.Fatalf("another body with the key: %v", err)
	}
	if _, err := e.capture(p, "cap-2", nil); errs.CodeOf(err) != errs.CodeNotCapturable {
		t.Fatalf("a second capture: %v", err)
	}
	if n := e.psp.CapturesOf(p.MerchantOrderID); n != 1 {
		t.Fatalf("%d captures at the PSP, want 1", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ? AND type = 'payment.partially_captured'`, p.ID); n != 1 {
		t.Fatalf("%d payment.partially_captured events", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ? AND type = 'payment.requires_capture'`, p.ID); n != 1 {
		t.Fatalf("%d payment.requires_capture events", n)
	}
	if _, err := e.refund(e.reread(p), "r", amt(601)); errs.CodeOf(err) != errs.CodeRefundExceeds {
		t.Fatalf("a refund beyond the captured amount: %v", err)
	}
	if out, err := e.refund(e.reread(p), "r", nil); err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("refund of the captured amount: %+v %v", out, err)
	}
	if got := e.reread(p); got.AmountRefunded != 600 {
		t.Fatalf("refunded %d, want 600", got.AmountRefunded)
	}
}

// Capture of more than authorized, of an automatic payment, and with a
// body that is not valid: refused, nothing stored, the key stays free.
func TestCaptureRefusals(t *testing.T) {
	e := newEnv(t)
	p := e.authorized("auth", 1000)
	if _, err := e.capture(p, "k", amt(1001)); errs.CodeOf(err) != errs.CodeCaptureExceeds {
		t.Fatalf("capture over the authorization: %v", err)
	}
	if _, err := e.capture(p, "k", amt(0)); errs.CodeOf(err) != errs.CodeInvalid {
		t.Fatalf("capture of nothing: %v", err)
	}
	auto := e.paid("auto", 1000)
	if _, err := e.capture(auto, "k", nil); errs.CodeOf(err) != errs.CodeNotCapturable {
		t.Fatalf("capture of an automatic payment: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE endpoint = ?`, payments.EndpointCapturePayment); n != 0 {
		t.Fatalf("%d capture keys stored by refusals", n)
	}
	other := payments.Payment{ID: "pay_01ARZ3NDEKTSV4RRFFQ69G5FAV"}
	if _, err := e.capture(other, "k", nil); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("capture of no payment: %v", err)
	}
	if out, err := e.capture(p, "k", nil); err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("the key is still free: %+v %v", out, err)
	}
}

// The same capture key from 50 clients at once: one PSP capture, one
// answer for all.
func TestFiftyClientsOneCaptureKey(t *testing.T) {
	e := newEnv(t)
	p := e.authorized("auth", 1000)
	var wg sync.WaitGroup
	bodies := make([][]byte, 50)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				out, err := e.capture(p, "cap", nil)
				if errs.CodeOf(err) == errs.CodeInFlight {
					continue
				}
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				bodies[i] = out.Response.Body
				return
			}
		}()
	}
	wg.Wait()
	for i := range bodies {
		if !bytes.Equal(bodies[i], bodies[0]) {
			t.Fatalf("client %d got %s, client 0 %s", i, bodies[i], bodies[0])
		}
	}
	if n := e.psp.CapturesOf(p.MerchantOrderID); n != 1 {
		t.Fatalf("%d PSP captures, want 1", n)
	}
	if got := e.reread(p); got.Status != payments.Succeeded || got.AmountCaptured != 1000 || got.Operation != nil {
		t.Fatalf("payment %+v", got)
	}
}

// Captures with distinct keys and a void, all at once on one
// authorization: exactly one wins, at the PSP and in the rows; the others
// are refused with nothing stored.
func TestCapturesAndAVoidRace(t *testing.T) {
	e := newEnv(t)
	p := e.authorized("auth", 1000)
	e.psp.SetLatency(5 * time.Millisecond) // keep the winner in flight while the others claim
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[string]int{}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out payments.Outcome
			var err error
			if i == 0 {
				out, err = e.cancel(p, "void", "")
			} else {
				out, err = e.capture(p, fmt.Sprint("cap-", i), amt(int64(100*i)))
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won[fmt.Sprint(out.Response.Status)]++
			case errs.CodeOf(err) == errs.CodeInFlight, errs.CodeOf(err) == errs.CodeNotCapturable, errs.CodeOf(err) == errs.CodeNotCancelable:
				won["refused"]++
			default:
				t.Errorf("request %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if won["refused"] != 7 || won["201"]+won["200"] != 1 {
		t.Fatalf("outcomes %v, want one winner and 7 refusals", won)
	}
	captures, voids := e.psp.CapturesOf(p.MerchantOrderID), len(e.psp.Voids())
	if captures+voids != 1 {
		t.Fatalf("%d captures and %d voids at the PSP, want one in all", captures, voids)
	}
	got := e.reread(p)
	switch {
	case captures == 1 && (got.Status != payments.Succeeded || got.AmountCaptured <= 0):
		t.Fatalf("captured at the PSP, recorded %+v", got)
	case voids == 1 && got.Status != payments.Canceled:
		t.Fatalf("voided at the PSP, recorded %+v", got)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE endpoint IN (?, ?)`, payments.EndpointCapturePayment, payments.EndpointCancelPayment); n != 1 {
		t.Fatalf("%d operation keys stored, want only the winner's", n)
	}
}

// A capture whose answer is lost after the PSP captured: the retry looks
// the charge up first and settles it; one capture in the ledger. The same
// when nobody retries: the reconciler settles it.
func TestLostCaptureAnswer(t *testing.T) {
	e := newEnv(t)
	for _, retry := range []bool{true, false} {
		p := e.authorized(fmt.Sprint("auth-", retry), 1000)
		e.psp.FailNextCaptures(fake.FaultUnknownAfterCharge, 1)
		if _, err := e.capture(p, fmt.Sprint("cap-", retry), nil); errs.CodeOf(err) != errs.CodePSPUnknown {
			t.Fatalf("lost answer: %v", err)
		}
		if retry {
			e.advance(lease + time.Second)
			out, err := e.capture(p, fmt.Sprint("cap-", retry), nil)
			if err != nil || out.Response.Status != http.StatusCreated {
				t.Fatalf("retry: %+v %v", out, err)
			}
		} else {
			e.advance(lease + time.Second)
			wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Succeeded: 1})
		}
		if n := e.psp.CapturesOf(p.MerchantOrderID); n != 1 {
			t.Fatalf("retry %v: %d captures at the PSP", retry, n)
		}
		if got := e.reread(p); got.Status != payments.Succeeded || got.AmountCaptured != 1000 {
			t.Fatalf("retry %v: payment %+v", retry, got)
		}
	}
}

// A void releases the authorization (canceled, its reason, one void at the
// PSP); a capture after it is refused; a void of a captured payment too.
func TestVoidAnAuthorization(t *testing.T) {
	e := newEnv(t)
	p := e.authorized("auth", 1000)
	out, err := e.cancel(p, "v", payments.CancelFraudulent)
	if err != nil || out.Response.Status != http.StatusOK {
		t.Fatalf("void: %+v %v", out, err)
	}
	if v := view(t, out.Response.Body); v.Status != payments.Canceled || v.CancellationReason == nil || *v.CancellationReason != payments.CancelFraudulent {
		t.Fatalf("voided view %+v", v)
	}
	if _, err := e.capture(p, "c", nil); errs.CodeOf(err) != errs.CodeNotCapturable {
		t.Fatalf("capture after the void: %v", err)
	}
	if n := len(e.psp.Voids()); n != 1 {
		t.Fatalf("%d voids at the PSP", n)
	}
	captured := e.authorized("auth-2", 500)
	if _, err := e.capture(captured, "c2", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cancel(captured, "v2", ""); errs.CodeOf(err) != errs.CodeNotCancelable {
		t.Fatalf("void after the capture: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ? AND type = 'payment.canceled'`, p.ID); n != 1 {
		t.Fatalf("%d payment.canceled events", n)
	}
}

// An authorization nobody captured before its capture_before is recorded
// expired by the reconciler (canceled, authorization_expired, its event);
// a capture after that is a 409 that names the payment.
func TestAnAuthorizationExpires(t *testing.T) {
	e := newEnv(t)
	p := e.authorized("auth", 1000)
	e.advance(payments.DefaultAuthorizationValidity + time.Minute)
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Canceled: 1})
	got := e.reread(p)
	if got.Status != payments.Canceled || got.CancellationReason != payments.CancelAuthorizationExpired {
		t.Fatalf("payment %+v", got)
	}
	_, err := e.capture(p, "late", nil)
	var pe *errs.Error
	if errs.CodeOf(err) != errs.CodeAuthorizationExpired || !errors.As(err, &pe) || pe.PaymentID != p.ID {
		t.Fatalf("capture after the expiry: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ? AND type = 'payment.canceled'`, p.ID); n != 1 {
		t.Fatalf("%d payment.canceled events", n)
	}
	if n := e.psp.CapturesOf(p.MerchantOrderID); n != 0 {
		t.Fatalf("%d captures at the PSP", n)
	}
}

// An unconfirmed payment is canceled by its key at once, nothing sent.
func TestCancelAnUnconfirmedPayment(t *testing.T) {
	e := newEnv(t)
	req := e.request("later")
	req.ConfirmLater, req.PaymentMethod = true, ""
	created, err := e.svc.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	p := payments.Payment{ID: created.SubjectID}
	out, err := e.cancel(p, "c", payments.CancelAbandoned)
	if err != nil || out.Response.Status != http.StatusOK || view(t, out.Response.Body).Status != payments.Canceled {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	again, err := e.cancel(p, "c", payments.CancelAbandoned)
	if err != nil || !again.Replayed || !bytes.Equal(again.Response.Body, out.Response.Body) {
		t.Fatalf("replay: %+v %v", again, err)
	}
	if e.psp.ChargeCalls() != 0 || e.psp.VoidCalls() != 0 {
		t.Fatal("the PSP was called")
	}
}

// noCapture is a PSP that cannot capture later (as Toss): the adapter
// without its Capturer methods.
type noCapture struct{ psp.Adapter }

// Manual capture at a PSP that cannot capture later is refused before
// anything is stored or sent.
func TestManualCaptureNeedsAPSPThatCaptures(t *testing.T) {
	e := newEnv(t)
	svc := payments.NewService(e.store, payments.OnePSP(noCapture{e.psp}), payments.Config{Lease: lease, Now: e.clock.Now})
	req := e.request("manual")
	req.CaptureMethod = payments.CaptureManual
	_, err := svc.Create(context.Background(), req)
	var pe *errs.Error
	if errs.CodeOf(err) != errs.CodePSPCannotAccept || !errors.As(err, &pe) || len(pe.Fields) != 1 || pe.Fields[0].Field != "capture_method" {
		t.Fatalf("manual capture at a PSP that cannot: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys`) + e.count(`SELECT COUNT(*) FROM payments`); n != 0 || e.psp.ChargeCalls() != 0 {
		t.Fatalf("%d rows stored, %d charges sent", n, e.psp.ChargeCalls())
	}
}

// Two-step checkout takes manual capture too: the payment created without
// a method and confirmed by its customer ends authorized, not charged in
// full, and its capture takes the money once.
func TestTwoStepCheckoutAuthorizes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := e.request("two-step")
	req.ConfirmLater, req.PaymentMethod, req.CaptureMethod = true, "", payments.CaptureManual
	created, err := e.svc.Create(ctx, req)
	if err != nil || created.Response.Status != http.StatusAccepted {
		t.Fatalf("create: %+v %v", created, err)
	}
	if n := e.psp.ChargeCalls(); n != 0 {
		t.Fatalf("%d charges sent before the confirm", n)
	}
	out, err := e.svc.Confirm(ctx, payments.ConfirmRequest{MerchantID: e.merch.ID, PaymentID: created.SubjectID, IdempotencyKey: "c",
		PaymentMethod: fake.MethodOK})
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("confirm: %+v %v", out, err)
	}
	if v := view(t, out.Response.Body); v.Status != payments.RequiresCapture || v.AmountCapturable == nil || *v.AmountCapturable != req.Amount.Minor {
		t.Fatalf("confirmed view %+v", v)
	}
	p := e.reread(payments.Payment{ID: created.SubjectID})
	if p.Status != payments.RequiresCapture || p.AmountCaptured != 0 {
		t.Fatalf("confirmed payment %+v", p)
	}
	if got, err := e.capture(p, "cap", nil); err != nil || got.Response.Status != http.StatusCreated {
		t.Fatalf("capture: %+v %v", got, err)
	}
	if p = e.reread(p); p.Status != payments.Succeeded || p.AmountCaptured != req.Amount.Minor {
		t.Fatalf("captured payment %+v", p)
	}
	if n, c := e.psp.ChargeCount(), e.psp.CapturesOf(p.MerchantOrderID); n != 1 || c != 1 {
		t.Fatalf("%d authorizations and %d captures at the PSP, want 1 and 1", n, c)
	}
}

// A payment waiting for its customer with a void in flight is that void's
// to settle: the looks at payments waiting for their customer pass it by,
// and an operator's resolution is refused, until the void settles. Before,
// a look could settle it under the void, which then wrote over it.
func TestAPaymentWithAVoidInFlightIsLeftToIt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := e.request("3ds")
	req.ConfirmLater, req.PaymentMethod = true, ""
	created, err := e.svc.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e.svc.Confirm(ctx, payments.ConfirmRequest{MerchantID: e.merch.ID, PaymentID: created.SubjectID, IdempotencyKey: "c",
		PaymentMethod: fake.MethodThreeDS}); err != nil || out.Response.Status != http.StatusAccepted {
		t.Fatalf("confirm: %+v %v", out, err)
	}
	op := payments.Operation{Kind: payments.OpVoid, Key: "v", Reason: payments.CancelAbandoned}
	if _, err := e.store.ClaimOperation(ctx, payments.OperationClaim{Ref: op.Ref(e.merch.ID), Fingerprint: idemkeys.Fingerprint("v"),
		Token: idemkeys.FirstToken(), Lease: lease, PaymentID: created.SubjectID}, payments.NewOperation(op, func(payments.Payment) bool { return true })); err != nil {
		t.Fatal(err)
	}
	e.advance(payments.ActionFirstLook + time.Second)
	if looks, err := e.store.ClaimActions(ctx, lease, 10); err != nil || len(looks) != 0 {
		t.Fatalf("%d looks claimed (%v), want none while the void is in flight", len(looks), err)
	}
	adm := review.New(e.store, review.Config{PSPs: payments.OnePSP(e.psp)})
	if _, err := adm.Resolve(ctx, payments.Resolution{PaymentID: created.SubjectID, To: payments.Failed, Reason: "x", Actor: "ops", Force: true}); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("an operator's resolution under the void: %v", err)
	}
}
