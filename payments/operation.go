package payments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp"
)

// Captures and voids (design §15): each a command of its own kind on the
// one flow, with its own endpoint-scoped keys, acting on an authorization
// (a payment in requires_capture) or, for a void, on a payment still
// waiting for its customer. The payment row holds the one operation in
// flight (Payment.Operation), set by the claim's compare-and-set: a capture
// and a void exclude each other, and an authorization is captured once.

// The endpoints of operations; their keys hold the payment they act on.
const (
	EndpointCapturePayment = "POST /payments/{id}/capture"
	EndpointCancelPayment  = "POST /payments/{id}/cancel"
)

// OperationKind is what an operation does at the PSP.
type OperationKind string

const (
	// OpCapture takes (part of) an authorization.
	OpCapture OperationKind = "capture"
	// OpVoid releases an authorization, or cancels a charge waiting for its
	// customer.
	OpVoid OperationKind = "void"
)

// Operation is a capture or a void in flight on a payment.
type Operation struct {
	Kind OperationKind
	// Key is its Idempotency-Key, of EndpointCapturePayment or
	// EndpointCancelPayment by its kind.
	Key string
	// Amount is what a capture takes, in the payment's minor units.
	Amount int64
	// Reason is a void's cancellation reason.
	Reason string
}

// Endpoint is the endpoint whose keys claim operations of kind k.
func (k OperationKind) Endpoint() string {
	if k == OpCapture {
		return EndpointCapturePayment
	}
	return EndpointCancelPayment
}

// Ref is the operation's key, of the payment's merchant.
func (o Operation) Ref(merchantID string) idemkeys.Ref {
	return idemkeys.Ref{MerchantID: merchantID, Endpoint: o.Kind.Endpoint(), Key: o.Key}
}

// OperationOrderID derives the order id the PSP deduplicates an operation
// on, from (merchant, payment, key): "cap_…" or "vod_…", 28 characters.
func OperationOrderID(kind OperationKind, merchantID, paymentID, key string) string {
	sum := sha256.Sum256([]byte(string(kind) + "\x00" + merchantID + "\x00" + paymentID + "\x00" + key))
	prefix := "cap_"
	if kind == OpVoid {
		prefix = "vod_"
	}
	return prefix + hex.EncodeToString(sum[:12])
}

// CaptureRequest is the command behind POST /payments/{id}/capture.
type CaptureRequest struct {
	MerchantID     string
	PaymentID      string
	IdempotencyKey string
	// AmountToCapture is at most the authorized amount; nil captures all of
	// it. A smaller amount releases the rest.
	AmountToCapture *int64
}

// Validate reports every invalid field at once.
func (r CaptureRequest) Validate() error {
	if a := r.AmountToCapture; a != nil && (*a <= 0 || *a > MaxAmountMinor) {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid", Fields: []errs.FieldError{{Field: "amount_to_capture",
			Reason: fmt.Sprintf("must be a positive integer in minor units, at most %d, or left out to capture the whole authorization", int64(MaxAmountMinor))}}}
	}
	return nil
}

// Fingerprint identifies the command, the payment it captures included.
func (r CaptureRequest) Fingerprint() [32]byte {
	amount := "all"
	if r.AmountToCapture != nil {
		amount = strconv.FormatInt(*r.AmountToCapture, 10)
	}
	return idemkeys.Fingerprint("capture-v1", r.PaymentID, amount)
}

// CancelRequest is the command behind POST /payments/{id}/cancel.
type CancelRequest struct {
	MerchantID     string
	PaymentID      string
	IdempotencyKey string
	// Reason is one of CancellationReasons; empty says requested_by_customer.
	Reason string
}

// Validate reports every invalid field at once.
func (r CancelRequest) Validate() error {
	if r.Reason != "" && !slices.Contains(CancellationReasons, r.Reason) {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid", Fields: []errs.FieldError{{Field: "cancellation_reason",
			Reason: "must be one of " + strings.Join(CancellationReasons, ", ")}}}
	}
	return nil
}

// Fingerprint identifies the command, the payment it cancels included.
func (r CancelRequest) Fingerprint() [32]byte {
	return idemkeys.Fingerprint("cancel-v1", r.PaymentID, r.reason())
}

func (r CancelRequest) reason() string {
	if r.Reason == "" {
		return CancelRequestedByCustomer
	}
	return r.Reason
}

// OperationClaim is what an operation's claim writes: its key's record
// (its subject the payment) and the operation on the payment.
type OperationClaim struct {
	Ref         idemkeys.Ref
	Fingerprint [32]byte
	Token       idemkeys.Token
	// Lease is how long the claimant owns the key and may send.
	Lease     time.Duration
	PaymentID string
}

// NewOperation is how an operation's claim decides, under the payment's
// row lock at the database's time now, whether op may start on p (the
// refusals depend on state that changes: never stored, the key stays
// free), and what the claim writes: the payment with op in flight; or, for
// a void of a payment nobody confirmed, its cancellation at once, with its
// event and the key's answer (no PSP holds anything of it). canVoid says
// whether p's PSP can cancel a charge waiting for its customer.
func NewOperation(op Operation, canVoid func(Payment) bool) func(Payment, time.Time) (PaymentChange, error) {
	return func(p Payment, now time.Time) (PaymentChange, error) {
		if p.Operation != nil {
			return PaymentChange{}, &errs.Error{Code: errs.CodeInFlight, PaymentID: p.ID, RetryAfter: time.Second,
				Message: fmt.Sprintf("payment %s has a %s in progress; retry once it is settled", p.ID, p.Operation.Kind)}
		}
		switch op.Kind {
		case OpCapture:
			if err := capturable(p, now); err != nil {
				return PaymentChange{}, err
			}
			if op.Amount == 0 {
				op.Amount = p.Amount.Minor
			}
			if op.Amount > p.Amount.Minor {
				return PaymentChange{}, &errs.Error{Code: errs.CodeCaptureExceeds, PaymentID: p.ID, Message: "the capture exceeds the authorization",
					Fields: []errs.FieldError{{Field: "amount_to_capture", Reason: fmt.Sprintf("at most %d %s of payment %s is authorized", p.Amount.Minor, p.Amount.Currency, p.ID)}}}
			}
		case OpVoid:
			switch {
			case p.Status == RequiresConfirmation:
				canceled := p
				canceled.Status, canceled.CancellationReason, canceled.UpdatedAt = Canceled, op.Reason, now
				c := paymentChange(p, canceled)
				resp := renderOperation(OpVoid, canceled, false)
				c.Key, c.Answer = op.Ref(p.MerchantID), &resp
				return c, nil
			case p.Status == RequiresCapture:
			case p.Status == RequiresAction && canVoid(p):
			default:
				return PaymentChange{}, &errs.Error{Code: errs.CodeNotCancelable, PaymentID: p.ID,
					Message: fmt.Sprintf("payment %s is %s; only an authorization (requires_capture), a payment awaiting its confirmation or one waiting for its customer can be canceled (refund a succeeded one)", p.ID, p.Status)}
			}
		}
		claimed := p
		claimed.Operation, claimed.UpdatedAt = &op, now
		return PaymentChange{Payment: claimed, Key: op.Ref(p.MerchantID)}, nil
	}
}

// capturable refuses a capture of p at the database's time now.
func capturable(p Payment, now time.Time) error {
	switch {
	case p.Status == Canceled && p.CancellationReason == CancelAuthorizationExpired,
		p.Status == RequiresCapture && !p.CaptureBefore.IsZero() && !now.Before(p.CaptureBefore):
		return &errs.Error{Code: errs.CodeAuthorizationExpired, PaymentID: p.ID,
			Message: fmt.Sprintf("the authorization of payment %s expired before it was captured", p.ID)}
	case p.Status != RequiresCapture:
		return &errs.Error{Code: errs.CodeNotCapturable, PaymentID: p.ID,
			Message: fmt.Sprintf("payment %s is %s; only an authorization (requires_capture) can be captured", p.ID, p.Status)}
	}
	return nil
}

// ErrOperationPending: the PSP's record says the operation has not
// happened (the charge is still authorized, or still waits for its
// customer): as unknown as a charge the PSP does not hold yet.
var ErrOperationPending = errors.New("payments: the operation has not happened at the PSP")

// ApplyOperation is the one rule turning the PSP's record of a payment's
// charge, after or about its operation in flight, into the payment's
// state: captured (succeeded, with what the capture took), voided
// (canceled, for the void's reason; a capture that finds its authorization
// voided records it expired), declined (a charge waiting for its customer
// that failed), or ErrOperationPending when the operation has not happened.
// A charge that is not the payment's goes to requires_review.
func ApplyOperation(p Payment, c psp.Charge) (Payment, error) {
	op := p.Operation
	if op == nil {
		return p, errors.New("payments: no operation in flight")
	}
	if reason := chargeMismatch(p, c); reason != "" {
		p.Status, p.ReviewReason, p.Operation = RequiresReview, reason, nil
		return p, nil
	}
	switch c.Status {
	case psp.Authorized, psp.Pending:
		return p, ErrOperationPending
	case psp.Succeeded:
		if p.Status == RequiresAction {
			// The customer paid before the void: the charge stands.
			p.Status, p.NextAction, p.Operation = Succeeded, nil, nil
			p.PSPReference = c.Reference
			return p, nil
		}
		p.Status, p.AmountCaptured, p.CaptureBefore, p.Operation = Succeeded, c.AmountCaptured, time.Time{}, nil
		if p.AmountCaptured <= 0 || p.AmountCaptured > p.Amount.Minor {
			// The PSP did not say: what this capture asked for.
			p.AmountCaptured = min(max(op.Amount, 0), p.Amount.Minor)
			if p.AmountCaptured == 0 {
				p.AmountCaptured = p.Amount.Minor
			}
		}
	case psp.Voided:
		p.Status, p.CaptureBefore, p.NextAction = Canceled, time.Time{}, nil
		p.CancellationReason = op.Reason
		if op.Kind == OpCapture || p.CancellationReason == "" {
			p.CancellationReason = CancelAuthorizationExpired
		}
		p.Operation = nil
	case psp.Declined:
		if op.Kind == OpVoid {
			// A charge waiting for its customer, canceled at its PSP (or
			// refused first): nothing moved, and the merchant asked this.
			p.Status, p.CancellationReason, p.NextAction, p.Operation = Canceled, op.Reason, nil, nil
			break
		}
		p.Status, p.DeclineCode, p.PSPCode, p.NextAction, p.Operation = Declined, c.DeclineCode, c.Code, nil, nil
	default:
		return p, fmt.Errorf("%w: %q", ErrChargeUnreadable, c.Status)
	}
	return p, nil
}

// Events of captures.
const (
	EventPaymentCaptured          EventType = "payment.captured"
	EventPaymentPartiallyCaptured EventType = "payment.partially_captured"
)

// OperationSettled is the change that settles p's operation under its
// key's lease: from before (as claimed) to p, its key completing with the
// operation's answer; refused says the PSP refused the operation itself,
// which leaves the payment as it was.
func OperationSettled(kind OperationKind, before, p Payment, refused bool) PaymentChange {
	c := PaymentChange{Payment: p, Key: before.Operation.Ref(p.MerchantID), From: before.Status}
	if p.Status != before.Status {
		e := PaymentEvent(p)
		if p.Status == Succeeded && kind == OpCapture {
			e.Type = EventPaymentCaptured
			if p.AmountCaptured < p.Amount.Minor {
				e.Type = EventPaymentPartiallyCaptured
			}
		}
		c.Event = &e
	}
	resp := renderOperation(kind, p, refused)
	c.Answer = &resp
	return c
}

// renderOperation is the answer an operation's key stores: the payment as
// the operation left it, with 201 for a capture that took its money, 200
// for a void that released it, 402 when the PSP refused it or another
// outcome won (the authorization lapsed, the customer paid first), 202
// while in review.
func renderOperation(kind OperationKind, p Payment, refused bool) idemkeys.Response {
	resp := Render(p)
	switch {
	case refused:
		resp.Status = http.StatusPaymentRequired
	case p.Status == RequiresReview:
		resp.Status = http.StatusAccepted
	case kind == OpCapture && p.Status == Succeeded:
		resp.Status = http.StatusCreated
	case kind == OpVoid && p.Status == Canceled:
		resp.Status = http.StatusOK
	default:
		resp.Status = http.StatusPaymentRequired
	}
	return resp
}

// Capture takes (part of) an authorization, at most once per (merchant,
// key): the same flow and guarantees as Create. The claim sets the capture
// in flight on the payment under its row lock, so that an authorization is
// captured once, never after a void.
//
// Errors are *errs.Error: CodeInvalidKey, CodeInvalid; CodeNotFound;
// CodeNotCapturable, CodeAuthorizationExpired, CodeCaptureExceeds and
// CodeInFlight (an operation of another key in progress) with nothing
// stored; CodeKeyMismatch, CodeKeyReused; CodePSPUnavailable and
// CodePSPUnknown (retry with the same key); CodeUnavailable, CodeInternal.
func (s *Service) Capture(ctx context.Context, req CaptureRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	op := Operation{Kind: OpCapture, Key: req.IdempotencyKey}
	if req.AmountToCapture != nil {
		op.Amount = *req.AmountToCapture
	}
	return s.operate(ctx, req.MerchantID, req.PaymentID, op, req.Fingerprint())
}

// Cancel voids an authorization, cancels a payment awaiting its
// confirmation, or cancels at its PSP a charge waiting for its customer,
// at most once per (merchant, key). Errors as Capture's, CodeNotCancelable
// for a payment that cannot be canceled (refund a succeeded one).
func (s *Service) Cancel(ctx context.Context, req CancelRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	op := Operation{Kind: OpVoid, Key: req.IdempotencyKey, Reason: req.reason()}
	return s.operate(ctx, req.MerchantID, req.PaymentID, op, req.Fingerprint())
}

// operate runs op on the merchant's payment through the flow.
func (s *Service) operate(ctx context.Context, merchantID, paymentID string, op Operation, fp [32]byte) (Outcome, error) {
	ref := op.Ref(merchantID)
	return s.run(ctx, ref, fp, [32]byte{}, func(ctx context.Context, token idemkeys.Token) (subject, *idemkeys.Response, error) {
		var answer *idemkeys.Response
		decide := NewOperation(op, s.canVoid)
		p, err := s.store.ClaimOperation(ctx, OperationClaim{Ref: ref, Fingerprint: fp, Token: token, Lease: s.cfg.Lease, PaymentID: paymentID},
			func(p Payment, now time.Time) (PaymentChange, error) {
				c, err := decide(p, now)
				answer = c.Answer
				return c, err
			})
		if errors.Is(err, errs.ErrNotFound) {
			err = &errs.Error{Code: errs.CodeNotFound, Message: "payment not found"}
		}
		return operationSubject{p: p, op: op.Kind}, answer, err
	})
}

// canVoid says whether p's PSP can cancel a charge waiting for its customer.
func (s *Service) canVoid(p Payment) bool {
	a, ok := s.psps.For(p.PSP)
	if !ok {
		return false
	}
	_, capturer := a.(psp.Capturer)
	return capturer && a.Capabilities().ManualCapture
}

// operationSubject is a capture or a void as a subject of the flow
// (flow.go): sent with its own order id to the payment's PSP, looked up by
// reading the payment's charge, and read with ApplyOperation.
type operationSubject struct {
	// p is the payment, its operation in flight (p.Operation) as claimed;
	// once read, the payment as the operation left it, and before as
	// claimed.
	p, before Payment
	op        OperationKind
	refused   bool
}

func (o operationSubject) kind() Kind {
	if o.op == OpCapture {
		return KindCapture
	}
	return KindVoid
}
func (o operationSubject) id() string { return o.p.ID }

func (o operationSubject) pspName() string { return o.p.PSP }

// created is when the operation was claimed: the payment's last change.
func (o operationSubject) created() time.Time { return o.claimed().UpdatedAt }
func (o operationSubject) status() string     { return string(o.p.Status) }

// claimed is the payment as claimed, with the operation in flight.
func (o operationSubject) claimed() Payment {
	if o.before.ID != "" {
		return o.before
	}
	return o.p
}

func (o operationSubject) send(ctx context.Context, adapter psp.Adapter) (answer, error) {
	p := o.claimed()
	c, ok := adapter.(psp.Capturer)
	if !ok || !adapter.Capabilities().ManualCapture {
		return answer{}, &psp.Error{Class: psp.Rejected, Op: string(o.op), Err: errors.New("the PSP cannot capture or void later")}
	}
	order := OperationOrderID(o.op, p.MerchantID, p.ID, p.Operation.Key)
	var x psp.Charge
	var err error
	if o.op == OpCapture {
		x, err = c.Capture(ctx, psp.CaptureRequest{OrderID: order, MerchantOrderID: p.MerchantOrderID, ChargeReference: p.PSPReference,
			Amount: p.Operation.Amount, Currency: p.Amount.Currency})
	} else {
		x, err = c.Void(ctx, psp.VoidRequest{OrderID: order, MerchantOrderID: p.MerchantOrderID, ChargeReference: p.PSPReference,
			Reason: p.Operation.Reason})
	}
	if err != nil {
		return answer{}, err
	}
	ans, err := o.read(x)
	if errors.Is(err, ErrOperationPending) {
		// The PSP answered, and its charge says nothing happened: unknown,
		// as a charge that times out; the lookup decides.
		return answer{}, &psp.Error{Class: psp.Unknown, Op: string(o.op), Err: err}
	}
	return ans, err
}

func (o operationSubject) lookup(ctx context.Context, adapter psp.Adapter) (answer, error) {
	c, err := adapter.Lookup(ctx, o.claimed().MerchantOrderID)
	if err != nil {
		return answer{}, err
	}
	ans, err := o.read(c)
	if errors.Is(err, ErrOperationPending) {
		// The operation is not there (yet): as a charge the PSP does not hold.
		return answer{}, psp.ErrNotFound
	}
	return ans, err
}

// read turns the PSP's record of the charge into the payment's next state.
func (o operationSubject) read(c psp.Charge) (answer, error) {
	before := o.claimed()
	settled, err := ApplyOperation(before, c)
	switch {
	case errors.Is(err, ErrOperationPending):
		return answer{}, err
	case err != nil:
		return answer{}, &psp.Error{Class: psp.Unknown, Op: string(o.op), Err: err}
	case settled.Status == RequiresReview:
		return answer{next: o.as(settled, false), note: "PSP answer does not match the payment", attrs: []any{"reason", settled.ReviewReason}, warn: true}, nil
	}
	return answer{next: o.as(settled, false)}, nil
}

// as is the same operation with the payment in state p.
func (o operationSubject) as(p Payment, refused bool) subject {
	o.before, o.p, o.refused = o.claimed(), p, refused
	return o
}

func (o operationSubject) rejected(code string) subject {
	p := o.claimed()
	p.Operation = nil
	return o.as(p, true)
}

func (o operationSubject) orderTaken() subject {
	p := o.claimed()
	p.Status, p.ReviewReason, p.Operation = RequiresReview, "the PSP refused the "+string(o.op)+": its order id is already used", nil
	return o.as(p, false)
}

// settle completes the key with the operation's answer and writes the
// payment as the operation left it, fenced on the key's token and on the
// operation still being the payment's.
func (o operationSubject) settle(ctx context.Context, store FlowStore, ref idemkeys.Ref, token idemkeys.Token) (idemkeys.Response, error) {
	c := OperationSettled(o.op, o.claimed(), o.p, o.refused)
	return *c.Answer, store.SettleOperation(ctx, ref, token, c)
}

func (o operationSubject) recorded(obs Observer) {}

// AuthorizationExpired is the change that records p's authorization as
// lapsed at its capture_before: canceled, authorization_expired, with its
// event. The PSP releases the hold at its own expiry; a capture after this
// is refused (CodeAuthorizationExpired). The key keeps its answer, as an
// unconfirmed payment's does when it expires: GET /payments/{id} tells.
func AuthorizationExpired(p Payment) PaymentChange {
	after := p
	after.Status, after.CancellationReason, after.CaptureBefore = Canceled, CancelAuthorizationExpired, time.Time{}
	c := paymentChange(p, after)
	c.Answer = nil
	return c
}
