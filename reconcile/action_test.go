package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/notices"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// Two-step payments in the reconciler: a confirm's unfinished key, the
// looks at payments waiting for their customer, and the expiry of those
// nobody confirmed.

// later creates a payment to confirm later.
func (e *env) later(key string) payments.Payment {
	e.t.Helper()
	req := e.request(key)
	req.ConfirmLater, req.PaymentMethod = true, ""
	out, err := e.svc.Create(context.Background(), req)
	if err != nil || out.Response.Status != http.StatusAccepted {
		e.t.Fatalf("create: %+v %v", out, err)
	}
	p, err := e.store.Payment(context.Background(), e.merch.ID, out.SubjectID)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) confirm(p payments.Payment, key, method string) (payments.Outcome, error) {
	return e.svc.Confirm(context.Background(), payments.ConfirmRequest{MerchantID: e.merch.ID, PaymentID: p.ID, IdempotencyKey: key, PaymentMethod: method})
}

func (e *env) answer(ref idemkeys.Ref) idemkeys.Response {
	e.t.Helper()
	rec, err := e.store.Record(context.Background(), ref)
	if err != nil || rec.State != idemkeys.Completed {
		e.t.Fatalf("key %+v: %+v %v", ref, rec, err)
	}
	return rec.Response
}

// A confirm whose worker died after the PSP took the charge: the
// reconciler finds it waiting for the customer and records that, as the
// worker would have (its key completes with requires_action); once the
// customer passed 3-D Secure, its look settles the payment and the
// confirm's key replays the outcome.
func TestConfirmCrashedAfterChargeWaitsForTheCustomer(t *testing.T) {
	e := newEnv(t)
	p := e.later("k")
	ref := idemkeys.Ref{MerchantID: e.merch.ID, Endpoint: payments.EndpointConfirmPayment, Key: "c"}
	fp := payments.ConfirmRequest{PaymentID: p.ID, PaymentMethod: fake.MethodThreeDS}.Fingerprint()
	claimed, err := e.store.ClaimConfirm(context.Background(), payments.ConfirmClaim{Ref: ref, Fingerprint: fp, Token: idemkeys.FirstToken(), Lease: lease, PaymentID: p.ID},
		payments.ChangePayment(func(p payments.Payment) (payments.Payment, error) {
			p.Status, p.PaymentMethod, p.ConfirmKey = payments.Processing, fake.MethodThreeDS, "c"
			return p, nil
		}))
	if err != nil || claimed.Status != payments.Processing {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	if _, err := e.psp.Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: p.MerchantOrderID, Amount: p.Amount.Minor,
		Currency: p.Amount.Currency, PaymentMethod: fake.MethodThreeDS, AllowNextAction: true}); err != nil {
		t.Fatal(err)
	}
	e.advance(lease + time.Second)
	r := e.reconciler(nil, nil)
	wantOutcomes(t, runOnce(t, r), map[reconcile.Outcome]int{reconcile.AwaitingCustomer: 1})
	if got := e.status(p.ID); got != payments.RequiresAction {
		t.Fatalf("status %s", got)
	}
	if a := e.answer(ref); a.Status != http.StatusAccepted {
		t.Fatalf("the confirm's key answers %d", a.Status)
	}
	if _, err := e.psp.Settle(p.MerchantOrderID, psp.Succeeded, ""); err != nil {
		t.Fatal(err)
	}
	e.advance(payments.ActionFirstLook + time.Second)
	wantOutcomes(t, runOnce(t, r), map[reconcile.Outcome]int{reconcile.Succeeded: 1})
	if a := e.answer(ref); a.Status != http.StatusCreated {
		t.Fatalf("the confirm's key answers %d after the settle", a.Status)
	}
	out, err := e.confirm(p, "c", fake.MethodThreeDS)
	if err != nil || !out.Replayed || out.Response.Status != http.StatusCreated {
		t.Fatalf("confirm replay: %+v %v", out, err)
	}
	if n := e.psp.ChargesFor(p.MerchantOrderID); n != 1 {
		t.Fatalf("%d charges", n)
	}
}

// The PSP's charge for a payment waiting for its customer turns out not to
// be the payment's: the payment goes to review, scheduled afresh, and the
// review queue takes it from there.
func TestActionLookMismatchGoesToReview(t *testing.T) {
	e := newEnv(t)
	p := e.later("k")
	out, err := e.confirm(p, "c", fake.MethodVirtualAccount)
	if err != nil || out.Response.Status != http.StatusAccepted {
		t.Fatalf("confirm: %+v %v", out, err)
	}
	// The PSP's ledger now holds another amount under the order id.
	e.psp.Reset()
	if _, err := e.psp.Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: p.MerchantOrderID, Amount: 2000, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
		t.Fatal(err)
	}
	e.advance(payments.ActionFirstLook + time.Second)
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Review: 1})
	got, err := e.store.Payment(context.Background(), e.merch.ID, p.ID)
	if err != nil || got.Status != payments.RequiresReview || got.ReviewReason == "" || got.Review.Attempts != 0 || got.Review.Since.IsZero() {
		t.Fatalf("payment %+v %v", got, err)
	}
	ref := idemkeys.Ref{MerchantID: e.merch.ID, Endpoint: payments.EndpointConfirmPayment, Key: "c"}
	if a := e.answer(ref); a.Status != http.StatusAccepted {
		t.Fatalf("confirm key answers %d", a.Status)
	}
	e.advance(payments.ReviewFirstLook + time.Second)
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.StillInReview: 1})
}

// The PSP's notification and the reconciler's look settle one payment at
// once: one of them wins, the other's write is fenced, one audit row.
func TestNotificationRacesTheActionLook(t *testing.T) {
	e := newEnv(t)
	p := e.later("k")
	if out, err := e.confirm(p, "c", fake.MethodThreeDS); err != nil || out.Response.Status != http.StatusAccepted {
		t.Fatalf("confirm: %+v %v", out, err)
	}
	c, err := e.psp.Settle(p.MerchantOrderID, psp.Succeeded, "")
	if err != nil {
		t.Fatal(err)
	}
	looking, release := make(chan struct{}), make(chan struct{})
	slow := &blockingLookup{Adapter: e.psp, arrived: looking, release: release}
	notices := notices.New(e.store, map[string]notices.Source{
		"fake": {PSP: payments.PSPName(e.psp.Capabilities()), Reader: staticNotice{psp.Notice{ID: "evt_1", Type: "test", Charges: []psp.Charge{c}}}},
	}, notices.Config{})
	e.advance(payments.ActionFirstLook + time.Second)
	done := make(chan reconcile.Summary, 1)
	go func() { done <- runOnce(t, e.reconciler(slow, nil)) }()
	<-looking // the look has claimed the payment and asks the PSP
	if err := notices.Receive(context.Background(), "fake", nil, nil); err != nil {
		t.Fatal(err)
	}
	close(release)
	sum := <-done
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Fenced: 1})
	if got := e.status(p.ID); got != payments.Succeeded {
		t.Fatalf("status %s", got)
	}
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ?`, p.ID); n != 1 {
		t.Fatalf("%d audit rows, want the notification's alone", n)
	}
}

// staticNotice reads every request as the same notice.
type staticNotice struct{ n psp.Notice }

func (s staticNotice) ReadNotice(context.Context, http.Header, []byte) (psp.Notice, error) {
	return s.n, nil
}

// A confirm and the expiry racing for one payment: whichever locks it
// first wins and the other finds nothing to do.
func TestExpiryRacesTheConfirm(t *testing.T) {
	ctx := context.Background()
	t.Run("the confirm holds the payment", func(t *testing.T) {
		e := newEnv(t)
		p := e.later("race-1")
		e.advance(payments.DefaultConfirmExpiry + time.Second)
		ref := idemkeys.Ref{MerchantID: e.merch.ID, Endpoint: payments.EndpointConfirmPayment, Key: "c-1"}
		var during []payments.Payment
		_, err := e.store.ClaimConfirm(ctx, payments.ConfirmClaim{Ref: ref, Token: idemkeys.FirstToken(), Lease: lease, PaymentID: p.ID},
			payments.ChangePayment(func(p payments.Payment) (payments.Payment, error) {
				// The confirm started in time and holds the row: expiry skips it.
				var err error
				during, err = e.store.ExpireUnconfirmed(ctx, 10, payments.Expired)
				if err != nil {
					return p, err
				}
				p.Status, p.PaymentMethod, p.ConfirmKey = payments.Processing, fake.MethodOK, "c-1"
				return p, nil
			}))
		if err != nil || len(during) != 0 {
			t.Fatalf("claim %v; expired %d while the confirm held it", err, len(during))
		}
		after, err := e.store.ExpireUnconfirmed(ctx, 10, payments.Expired)
		if err != nil || len(after) != 0 || e.status(p.ID) != payments.Processing {
			t.Fatalf("after the confirm: expired %d (%v), status %s", len(after), err, e.status(p.ID))
		}
	})
	t.Run("the expiry comes first", func(t *testing.T) {
		e := newEnv(t)
		p := e.later("race-2")
		e.advance(payments.DefaultConfirmExpiry + time.Second)
		wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Canceled: 1})
		_, err := e.confirm(p, "c-2", fake.MethodOK)
		if errs.CodeOf(err) != errs.CodeNotConfirmable {
			t.Fatalf("confirm after the expiry: %v", err)
		}
		var pe *errs.Error
		if !errors.As(err, &pe) || pe.PaymentID != p.ID {
			t.Fatalf("the refusal does not name the payment: %v", err)
		}
		if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE endpoint = ? AND idem_key = 'c-2'`, payments.EndpointConfirmPayment); n != 0 {
			t.Fatal("a refused confirm stored its key")
		}
		if n := e.psp.ChargeCalls(); n != 0 {
			t.Fatalf("%d charges sent", n)
		}
	})
}
