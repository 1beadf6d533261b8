package payments

import (
	"context"
	"errors"
	"time"

	"gateway/idemkeys"
	"gateway/psp"
)

// paymentSubject is a payment's charge as a subject of the flow (flow.go):
// sent with the payment's merchant order id, looked up by it, and read with
// ApplyCharge, the one rule that turns the PSP's record of a charge into the
// payment's state.
type paymentSubject struct {
	p Payment
	// twoStep: the key is a confirm's, whose customer is at a front end that
	// can complete a next action (3-D Secure): a charge that needs one
	// answers requires_action instead of being declined.
	twoStep bool
}

func (ps paymentSubject) kind() Kind         { return KindPayment }
func (ps paymentSubject) id() string         { return ps.p.ID }
func (ps paymentSubject) pspName() string    { return ps.p.PSP }
func (ps paymentSubject) created() time.Time { return ps.p.CreatedAt }
func (ps paymentSubject) status() string     { return string(ps.p.Status) }

func (ps paymentSubject) send(ctx context.Context, adapter psp.Adapter) (answer, error) {
	p := ps.p
	c, err := adapter.Charge(ctx, psp.ChargeRequest{
		MerchantOrderID: p.MerchantOrderID,
		MerchantID:      p.MerchantID,
		Amount:          p.Amount.Minor,
		Currency:        p.Amount.Currency,
		PaymentMethod:   p.PaymentMethod,
		Description:     p.Description,
		AllowNextAction: ps.twoStep,
		CaptureMethod:   psp.CaptureMethod(captureMethod(p.CaptureMethod)),
	})
	if err != nil {
		return answer{}, err
	}
	return ps.read(c)
}

func (ps paymentSubject) lookup(ctx context.Context, adapter psp.Adapter) (answer, error) {
	c, err := adapter.Lookup(ctx, ps.p.MerchantOrderID)
	if err != nil {
		return answer{}, err
	}
	return ps.read(c)
}

// read turns the PSP's record of the payment's charge into its next state.
func (ps paymentSubject) read(c psp.Charge) (answer, error) {
	settled, err := ApplyCharge(ps.p, c)
	switch {
	case errors.Is(err, ErrChargePending) && ps.twoStep:
		// The customer is at a front end: the answer says what it must do
		// (never logged: it may hold a client secret), and the payment
		// waits for the PSP's notification or the reconciler's look.
		waiting := AwaitCustomer(ps.p, c)
		action := "none"
		if waiting.NextAction != nil {
			action = waiting.NextAction.Type
		}
		return answer{next: ps.as(waiting), note: "payment waits for its customer", attrs: []any{"next_action", action}}, nil
	case errors.Is(err, ErrChargePending):
		// Accepted, not settled: the key stays unfinished and free for the
		// client's poll or retry, and the reconciler looks again later.
		resp := Render(ps.p)
		return answer{later: &resp}, nil
	case err != nil:
		return answer{}, &psp.Error{Class: psp.Unknown, Op: "charge", Err: err}
	case settled.Status == RequiresReview:
		return answer{next: ps.as(settled), note: "PSP answer does not match the payment", attrs: []any{"reason", settled.ReviewReason}, warn: true}, nil
	}
	return answer{next: ps.as(settled)}, nil
}

// as is the same charge with the payment in state p.
func (ps paymentSubject) as(p Payment) subject {
	ps.p = p
	return ps
}

func (ps paymentSubject) rejected(code string) subject {
	p := ps.p
	p.Status, p.DeclineCode, p.PSPCode = Failed, DeclineRejected, code
	return ps.as(p)
}

func (ps paymentSubject) orderTaken() subject {
	p := ps.p
	p.Status, p.ReviewReason = RequiresReview, "the PSP refused the charge: its order id is already used with another amount or currency"
	return ps.as(p)
}

// settle completes the key with the payment's answer and moves the payment
// out of processing, where every payment under a key's lease is.
func (ps paymentSubject) settle(ctx context.Context, store FlowStore, ref idemkeys.Ref, token idemkeys.Token) (idemkeys.Response, error) {
	c := PaymentSettled(ps.p)
	return *c.Answer, store.Settle(ctx, ref, token, c)
}

func (ps paymentSubject) recorded(obs Observer) {
	if ps.p.Status.Final() || ps.p.Status == RequiresReview {
		obs.PaymentRecorded(ps.p.Status, ps.p.DeclineCode)
	}
}
