package payments

import (
	"context"
	"errors"
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
// Errors are *errs.Error: errs.CodeInvalidKey, errs.CodeInvalid; errs.CodeNotFound (no such
// payment for the merchant), errs.CodeNotConfirmable (409) and
// errs.CodeConfirmMismatch (422): nothing stored, the key stays free;
// errs.CodeKeyMismatch, errs.CodeInFlight; errs.CodePSPUnavailable and errs.CodePSPUnknown
// (retry with the same key); errs.CodeUnavailable, errs.CodeInternal.
func (s *Service) Confirm(ctx context.Context, req ConfirmRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	a, done := s.newAttempt(ctx, idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointConfirmPayment, Key: req.IdempotencyKey}, req.Fingerprint())
	defer done()
	if e, ok := s.replays.get(a.ref, s.cfg.Now()); ok && e.fp == a.fp {
		return s.replay(a, e.paymentID, e.resp), nil
	}
	for range maxClaims {
		out, err := s.claimConfirm(a, req)
		if !errors.Is(err, errVanished) {
			return out, err
		}
	}
	return Outcome{}, errs.Internal(fmt.Errorf("key %s vanished %d times in a row", s.hash.Key(a.ref), maxClaims))
}

// newAttempt starts a request's work on ref: done ends it.
func (s *Service) newAttempt(ctx context.Context, ref idemkeys.Ref, fp [32]byte) (attempt, func()) {
	work, cancelWork := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease+s.cfg.PSPTimeout+flowMargin)
	waitCtx, cancel := context.WithTimeout(ctx, s.cfg.InFlightWait)
	a := attempt{ref: ref, fp: fp, client: ctx, work: work, waitCtx: waitCtx, working: &workMark{}}
	return a, func() { s.finish(a); cancel(); cancelWork() }
}

func (s *Service) claimConfirm(a attempt, req ConfirmRequest) (Outcome, error) {
	if out, err, closed := s.whenClosed(a); closed {
		return out, err
	}
	// A confirm this replica could not send changes nothing: refused before
	// its claim takes the payment out of requires_confirmation. (A payment's
	// PSP never changes; the claim reads the payment again under its lock.)
	if p, err := s.store.Payment(a.work, req.MerchantID, req.PaymentID); err == nil && p.Status == RequiresConfirmation {
		if _, ok := s.psps.For(p.PSP); !ok {
			s.obs.UnconfiguredPSP()
			return Outcome{}, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: 5 * time.Second, PaymentID: p.ID,
				Message: "this payment cannot be confirmed from here right now; retry with the same Idempotency-Key"}
		}
	}
	h := holding{token: idemkeys.FirstToken()}
	// The database stamps the claim after this instant (see claim).
	start := s.cfg.Now()
	p, err := s.store.ClaimConfirm(a.work, ConfirmClaim{Ref: a.ref, Fingerprint: a.fp, Token: h.token, Lease: s.cfg.Lease, PaymentID: req.PaymentID},
		func(p Payment, dbNow time.Time) (Payment, error) { return confirmable(p, req, dbNow) })
	switch {
	case err == nil:
		return s.chargeConfirmed(a, h, p, start)
	case errors.Is(err, idemkeys.ErrExists):
		return s.join(a)
	case errors.Is(err, errs.ErrNotFound):
		return Outcome{}, &errs.Error{Code: errs.CodeNotFound, Message: "payment not found"}
	case errors.Is(err, errs.ErrWriteUnknown):
		got, gp, gerr := s.store.LoadKey(a.work, a.ref)
		switch {
		case errors.Is(gerr, idemkeys.ErrNotFound):
			return Outcome{}, errVanished
		case gerr != nil:
			return Outcome{}, errs.Internal(errors.Join(err, gerr))
		case got.PaymentID == req.PaymentID && got.State == idemkeys.InProgress && got.Token == h.token:
			return s.chargeConfirmed(a, h, gp, start)
		}
		return s.join(a)
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return Outcome{}, e
	}
	return Outcome{}, errs.Internal(err)
}

// chargeConfirmed charges a payment whose confirm's key a holds from start.
func (s *Service) chargeConfirmed(a attempt, h holding, p Payment, start time.Time) (Outcome, error) {
	adapter, ok := s.psps.For(p.PSP)
	if !ok {
		return s.unreachable(a, h, p.ID, "payment")
	}
	s.obs.KeyOutcome(OutcomeFresh)
	s.begin(a)
	h.adapter = adapter
	return paymentSubject{s: s, p: p, twoStep: true}.charge(a, h, start.Add(s.cfg.Lease))
}

// createUnconfirmed stores a payment to confirm later and completes its key
// at once with the answer: no PSP is called.
func (s *Service) createUnconfirmed(a attempt, req CreateRequest) (Outcome, error) {
	if out, err, closed := s.whenClosed(a); closed {
		return out, err
	}
	name, adapter := s.psps.Default()
	p := newPayment(req, RequiresConfirmation, name)
	checkout, err := CheckoutFor(p, adapter.Capabilities())
	if err != nil {
		return Outcome{}, errs.Internal(err)
	}
	if p.ClientSecret, p.ClientSecretHash, err = newClientSecret(p.ID); err != nil {
		return Outcome{}, errs.Internal(err)
	}
	p, resp, err := s.store.ClaimUnconfirmed(a.work, Claim{Ref: a.ref, Fingerprint: a.fp, Token: idemkeys.FirstToken(), Lease: s.cfg.Lease, Payment: p},
		s.cfg.ConfirmExpiry, func(p Payment) idemkeys.Response {
			p.Checkout = checkout
			return Render(p)
		})
	switch {
	case err == nil:
		s.obs.KeyOutcome(OutcomeFresh)
		s.replays.put(a.ref, cachedReplay{fp: a.fp, paymentID: p.ID, resp: resp, expires: s.cfg.Now().Add(s.cfg.Retention)})
		s.log.InfoContext(a.client, "payment created to confirm later", s.hash.Attr(a.ref), "payment_id", p.ID, "psp", name)
		return Outcome{Response: resp, PaymentID: p.ID}, nil
	case errors.Is(err, idemkeys.ErrExists):
		return s.join(a)
	case errors.Is(err, errs.ErrWriteUnknown):
		rec, gerr := s.store.Record(a.work, a.ref)
		switch {
		case errors.Is(gerr, idemkeys.ErrNotFound):
			return Outcome{}, errVanished
		case gerr != nil:
			return Outcome{}, errs.Internal(errors.Join(err, gerr))
		case rec.PaymentID == p.ID:
			return Outcome{Response: rec.Response, PaymentID: p.ID}, nil // ours committed
		}
		return s.join(a)
	}
	return s.claimRefused(err)
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
