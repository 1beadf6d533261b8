package payments

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"gateway/errs"
	"gateway/idemkeys"
)

// Two-step checkout. A widget PSP (Toss) must be opened with the order id
// before the customer pays, and a card that needs 3-D Secure must be
// confirmed in the customer's browser: POST /payments with "confirm": false
// creates the payment (no PSP call; the key completes at once with the
// answer), and POST /payments/{id}/confirm, with a key of its own, runs the
// claim → PSP → fenced settle flow every charge runs. The confirm's claim
// moves the payment from requires_confirmation to processing under its row
// lock, so of two confirms with different keys one charges and the other
// finds the payment no longer confirmable. A charge that needs the customer
// settles as requires_action, stored; the PSP's notification or the
// reconciler's look settles it from there.

// EndpointConfirmPayment scopes the idempotency keys of POST
// /payments/{id}/confirm. Its key's payment_id is the payment it confirms,
// so that the takeover, the reconciler and the settle of a confirm's key
// work on the payment as they do for a one-step payment's key.
const EndpointConfirmPayment = "POST /payments/{id}/confirm"

// MaxOrderIDLen bounds the order id a confirm may repeat for checking.
const MaxOrderIDLen = 64

// ConfirmRequest is the command behind POST /payments/{id}/confirm.
type ConfirmRequest struct {
	MerchantID     string
	PaymentID      string
	IdempotencyKey string
	// PaymentMethod is the PSP client's result: a payment method id
	// (Stripe, the fake PSP) or Toss's paymentKey. Empty: the one given at
	// creation.
	PaymentMethod string
	// Amount and OrderID, when given, must be the payment's (Toss's widget
	// hands both back to the front end): checked before anything is sent.
	Amount  *int64
	OrderID string
}

// Validate reports every invalid field at once, as a errs.CodeInvalid *errs.Error.
func (r ConfirmRequest) Validate() error {
	var fields []errs.FieldError
	if utf8.RuneCountInString(r.PaymentMethod) > MaxPaymentMethodLen || !printable(r.PaymentMethod) {
		fields = append(fields, errs.FieldError{Field: "payment_method", Reason: fmt.Sprintf("must be at most %d printable characters", MaxPaymentMethodLen)})
	}
	if r.Amount != nil && (*r.Amount <= 0 || *r.Amount > MaxAmountMinor) {
		fields = append(fields, errs.FieldError{Field: "amount", Reason: fmt.Sprintf("must be a positive integer in minor units, at most %d", int64(MaxAmountMinor))})
	}
	if len(r.OrderID) > MaxOrderIDLen || !printable(r.OrderID) {
		fields = append(fields, errs.FieldError{Field: "order_id", Reason: fmt.Sprintf("must be at most %d printable characters", MaxOrderIDLen)})
	}
	if len(fields) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid", Fields: fields}
	}
	return nil
}

// Fingerprint identifies the command, the payment it confirms included.
func (r ConfirmRequest) Fingerprint() [32]byte {
	amount := "-"
	if r.Amount != nil {
		amount = strconv.FormatInt(*r.Amount, 10)
	}
	return idemkeys.Fingerprint("confirm-v1", r.PaymentID, r.PaymentMethod, amount, r.OrderID)
}

// confirmable decides, under the payment's row lock and on the database's
// clock, whether req may confirm p, and returns p as it is to be charged.
// Its refusals depend on state, so they are never stored: the key stays free.
func confirmable(p Payment, req ConfirmRequest, dbNow time.Time) (Payment, error) {
	var fields []errs.FieldError
	if req.Amount != nil && *req.Amount != p.Amount.Minor {
		fields = append(fields, errs.FieldError{Field: "amount", Reason: fmt.Sprintf("is %d; the payment is %d %s", *req.Amount, p.Amount.Minor, p.Amount.Currency)})
	}
	if req.OrderID != "" && req.OrderID != p.MerchantOrderID {
		fields = append(fields, errs.FieldError{Field: "order_id", Reason: "is not the payment's merchant_order_id " + p.MerchantOrderID})
	}
	if len(fields) > 0 {
		return p, &errs.Error{Code: errs.CodeConfirmMismatch, PaymentID: p.ID, Fields: fields,
			Message: "the confirm does not match the payment; nothing was sent to the provider"}
	}
	switch {
	case p.Status != RequiresConfirmation:
		return p, &errs.Error{Code: errs.CodeNotConfirmable, PaymentID: p.ID,
			Message: fmt.Sprintf("payment %s is %s, not awaiting confirmation; look it up with GET /payments/%s", p.ID, p.Status, p.ID)}
	case !p.ExpiresAt.IsZero() && !dbNow.Before(p.ExpiresAt):
		return p, &errs.Error{Code: errs.CodeNotConfirmable, PaymentID: p.ID,
			Message: fmt.Sprintf("payment %s expired unconfirmed at %s; create a new payment", p.ID, p.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	pm := req.PaymentMethod
	if pm == "" {
		pm = p.PaymentMethod
	}
	if pm == "" {
		return p, &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid",
			Fields: []errs.FieldError{{Field: "payment_method", Reason: "is required: the payment was created without one"}}}
	}
	p.Status, p.PaymentMethod, p.ConfirmKey = Processing, pm, req.IdempotencyKey
	return p, nil
}

// Confirm charges a payment created with "confirm": false, with the same
// guarantees as Create: at most once per (merchant, key), the same claim →
// PSP → fenced settle flow, the same answers, replays, resumes and
// reconciliation. The claim takes the payment out of requires_confirmation
// under its row lock, so a payment is charged by one confirm at most. A
// charge that needs the customer answers 202 requires_action with what the
// front end must do, stored; its outcome arrives later.
//
// Errors are *errs.Error: CodeInvalidKey, CodeInvalid; CodeNotFound (no such
// payment for the merchant), CodeNotConfirmable (409) and
// CodeConfirmMismatch (422): nothing stored, the key stays free;
// CodeKeyMismatch, CodeInFlight; CodePSPUnavailable and CodePSPUnknown
// (retry with the same key); CodeUnavailable, CodeInternal.
func (s *Service) Confirm(ctx context.Context, req ConfirmRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	ref := idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointConfirmPayment, Key: req.IdempotencyKey}
	fp := req.Fingerprint()
	return s.run(ctx, ref, fp, [32]byte{}, func(ctx context.Context, token idemkeys.Token) (subject, *idemkeys.Response, error) {
		sub := paymentSubject{p: Payment{ID: req.PaymentID}, twoStep: true}
		// A confirm this replica could not send changes nothing: refused
		// before its claim takes the payment out of requires_confirmation.
		// (A payment's PSP never changes; the claim reads the payment again
		// under its lock.)
		if p, err := s.store.Payment(ctx, req.MerchantID, req.PaymentID); err == nil && p.Status == RequiresConfirmation {
			if _, ok := s.psps.For(p.PSP); !ok {
				s.obs.UnconfiguredPSP()
				return sub, nil, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: 5 * time.Second, PaymentID: p.ID,
					Message: "this payment cannot be confirmed from here right now; retry with the same Idempotency-Key"}
			}
		}
		p, err := s.store.ClaimConfirm(ctx, ConfirmClaim{Ref: ref, Fingerprint: fp, Token: token, Lease: s.cfg.Lease, PaymentID: req.PaymentID},
			func(before Payment, dbNow time.Time) (PaymentChange, error) {
				after, err := confirmable(before, req, dbNow)
				if err != nil {
					return PaymentChange{}, err
				}
				after.UpdatedAt = dbNow
				c := paymentChange(before, after)
				c.Answer = nil // the confirm's key completes when the charge settles
				return c, nil
			})
		if err == nil {
			sub.p = p
		}
		return sub, nil, err
	})
}

// Expired is the change that cancels p, a payment nobody confirmed before
// its expiry: its event, and its creation's answer left as it was.
func Expired(p Payment) PaymentChange {
	after := p
	after.Status, after.DeclineCode = Canceled, DeclineExpired
	c := paymentChange(p, after)
	c.Answer = nil
	return c
}

// withCheckout fills in what a payment awaiting confirmation's front end
// needs, from its PSP, when this replica has it.
func (s *Service) withCheckout(p Payment) Payment {
	if p.Status != RequiresConfirmation {
		return p
	}
	if a, ok := s.psps.For(p.PSP); ok {
		if c, err := CheckoutFor(p, a.Capabilities()); err == nil {
			p.Checkout = c
		}
	}
	return p
}
