package payments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp"
)

// Cancel-by-key (design §15): "I no longer want whatever this key of POST
// /payments did or will do", from a merchant who does not know whether a
// payment exists. The claim decides from what the key holds (decideCancel),
// in one transaction that locks the key's record (or its absence) and its
// payment; a void or a refund it calls for runs on the one flow with keys
// derived from the canceled key, so that a cancellation finished by its
// request, a retry or the reconciler makes each once.

// EndpointCancelByKey scopes the cancellations' own idempotency keys.
const EndpointCancelByKey = "POST /payments/cancel_by_key"

// CancellationStatus is where a cancellation by key is.
type CancellationStatus string

const (
	// CancellationCanceled: nothing was charged under the key, and nothing will be.
	CancellationCanceled CancellationStatus = "canceled"
	// CancellationVoided: the key's authorization (or charge waiting for its customer) was released.
	CancellationVoided CancellationStatus = "voided"
	// CancellationRefunded: the key's payment took money and gave it all back.
	CancellationRefunded CancellationStatus = "refunded"
	// CancellationRequested: being carried out once the key's outcome is known.
	CancellationRequested CancellationStatus = "cancel_requested"
	// CancellationReview: it could not be carried out (a refund the PSP
	// refused): ops decide.
	CancellationReview CancellationStatus = "requires_review"
)

// KeyCancellation is one cancellation by key.
type KeyCancellation struct {
	MerchantID string
	// Key is the POST /payments key canceled; CancelKey the cancellation's own.
	Key, CancelKey string
	Reason         string
	Status         CancellationStatus
	// PaymentID is the key's payment, when it has one; RefundID the refund
	// that gave its money back.
	PaymentID, RefundID string
	Detail              string
	CreatedAt           time.Time
}

// Target is the canceled key's ref.
func (kc KeyCancellation) Target() idemkeys.Ref {
	return idemkeys.Ref{MerchantID: kc.MerchantID, Endpoint: EndpointCreatePayment, Key: kc.Key}
}

// Ref is the cancellation's own key.
func (kc KeyCancellation) Ref() idemkeys.Ref {
	return idemkeys.Ref{MerchantID: kc.MerchantID, Endpoint: EndpointCancelByKey, Key: kc.CancelKey}
}

// CanceledByKey is the fingerprint of a key canceled before anything
// claimed it: whatever request comes with it later replays the
// cancellation.
var CanceledByKey = idemkeys.Fingerprint("canceled-by-key")

// derivedKey is the key of the void or refund a cancellation makes: a
// function of the canceled key, so every attempt makes the same one.
func derivedKey(kc KeyCancellation) string {
	sum := sha256.Sum256([]byte(kc.MerchantID + "\x00" + kc.Key))
	return "cbk_" + hex.EncodeToString(sum[:20])
}

// CancelByKeyRequest is the command behind POST /payments/cancel_by_key.
type CancelByKeyRequest struct {
	MerchantID string
	// IdempotencyKey is the cancellation's own; Key the POST /payments key
	// it cancels.
	IdempotencyKey, Key string
	Reason              string
}

// Validate reports every invalid field at once.
func (r CancelByKeyRequest) Validate() error {
	var fields []errs.FieldError
	if err := idemkeys.ValidateKey(r.Key); err != nil {
		fields = append(fields, errs.FieldError{Field: "idempotency_key", Reason: "must be the Idempotency-Key of a POST /payments: " + err.Error()})
	}
	if err := (CancelRequest{Reason: r.Reason}).Validate(); err != nil {
		var e *errs.Error
		if errors.As(err, &e) {
			fields = append(fields, e.Fields...)
		}
	}
	if len(fields) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid", Fields: fields}
	}
	return nil
}

func (r CancelByKeyRequest) reason() string { return CancelRequest{Reason: r.Reason}.reason() }

// CancelClaim is what a cancellation's claim writes.
type CancelClaim struct {
	Ref         idemkeys.Ref
	Fingerprint [32]byte
	Token       idemkeys.Token
	// Target is the POST /payments key canceled.
	Target idemkeys.Ref
}

// CancelTarget is what a canceled key holds, read under its locks.
type CancelTarget struct {
	// Record is the key's record; nil when nothing claimed it yet.
	Record *idemkeys.Record
	// Payment is its payment, nil when none.
	Payment *Payment
}

// CancelDecision is what a cancellation's claim writes besides its own key.
type CancelDecision struct {
	Cancellation KeyCancellation
	// Tombstone, when set, is the answer the canceled key is stored
	// completed with (nothing claimed it yet).
	Tombstone *idemkeys.Response
	// Change, when set, cancels the key's payment now; with FenceKey the
	// key's expired lease is taken and the key completed with
	// Change.Answer.
	Change   *PaymentChange
	FenceKey bool
	// Answer is the cancellation's own key's answer.
	Answer idemkeys.Response
}

// ErrCanceledAlready: the key was canceled by another cancellation (another
// own key): nothing stored.
var ErrCanceledAlready = errors.New("payments: the key was canceled already")

// decideCancel is the cancellation's claim's decision, from what the key
// holds at the database's time now.
func decideCancel(kc KeyCancellation) func(CancelTarget, time.Time) (CancelDecision, error) {
	return func(t CancelTarget, now time.Time) (CancelDecision, error) {
		kc.CreatedAt = now
		d := CancelDecision{}
		canceledNow := func(p Payment) {
			after := p
			after.Status, after.CancellationReason, after.UpdatedAt = Canceled, kc.Reason, now
			c := paymentChange(p, after)
			d.Change = &c
			kc.Status, kc.PaymentID, kc.Detail = CancellationCanceled, p.ID, "canceled before anything was charged"
		}
		switch {
		case t.Record == nil:
			// Stored with the key for the record: join answers every
			// request with it canceled_by_key.
			d.Tombstone = &d.Answer
			kc.Status, kc.Detail = CancellationCanceled, "no payment was made under this key, and none will be: a request with it answers this cancellation"
		case t.Record.Fingerprint == CanceledByKey:
			return d, ErrCanceledAlready
		case t.Payment == nil:
			return d, fmt.Errorf("payments: key %s holds no payment", t.Record.SubjectID)
		case t.Record.State == idemkeys.InProgress && !t.Record.LeaseActive() && t.Record.SendAttempts == t.Record.SendsNotSent:
			canceledNow(*t.Payment)
			d.FenceKey = true
		case t.Record.State == idemkeys.InProgress:
			kc.Status, kc.PaymentID, kc.Detail = CancellationRequested, t.Payment.ID, "the payment's outcome is not known yet: it is voided or refunded once it is"
		case t.Payment.Status == RequiresConfirmation:
			canceledNow(*t.Payment)
			d.Change.Answer = nil // the key keeps its answer; GET /payments/{id} tells
		case t.Payment.Status == Declined, t.Payment.Status == Failed, t.Payment.Status == Canceled:
			kc.Status, kc.PaymentID, kc.Detail = CancellationCanceled, t.Payment.ID, "the payment charged nothing: nothing to cancel"
		default:
			kc.Status, kc.PaymentID, kc.Detail = CancellationRequested, t.Payment.ID, "the payment is voided or refunded next"
		}
		d.Cancellation = kc
		var shown *Payment
		if d.Change != nil {
			shown = &d.Change.Payment
		} else {
			shown = t.Payment
		}
		d.Answer = renderCancellation(kc, shown)
		return d, nil
	}
}

// CancellationView is the answer of POST /payments/cancel_by_key.
type CancellationView struct {
	Object             string             `json:"object"`
	IdempotencyKey     string             `json:"idempotency_key"`
	Status             CancellationStatus `json:"status"`
	CancellationReason string             `json:"cancellation_reason"`
	// Payment is the key's payment as the cancellation left it; nil when
	// the key made none.
	Payment  *View   `json:"payment"`
	RefundID *string `json:"refund_id"`
	Detail   string  `json:"detail"`
}

// renderCancellation is a cancellation's stored answer: 200 once it is
// done, 202 while it is carried out (rewritten when it is done).
func renderCancellation(kc KeyCancellation, p *Payment) idemkeys.Response {
	v := CancellationView{Object: "cancellation", IdempotencyKey: kc.Key, Status: kc.Status, CancellationReason: kc.Reason,
		RefundID: nullable(kc.RefundID), Detail: kc.Detail}
	if p != nil {
		pv := ToView(*p)
		pv.ClientSecret = ""
		v.Payment = &pv
	}
	body, err := encodeJSON(v)
	if err != nil {
		panic("payments: render cancellation: " + err.Error())
	}
	status := http.StatusOK
	if kc.Status == CancellationRequested {
		status = http.StatusAccepted
	}
	return idemkeys.Response{Status: status, Body: body}
}

// CancelByKey cancels whatever a key of POST /payments did or will do, at
// most once per (merchant, own key), and answers what it did and what is
// still to happen (design §15). The claim decides and writes in one
// transaction; a void or a refund it calls for is made at once, on the
// flow, and when that cannot finish now the reconciler carries it out
// later, rewriting the cancellation's stored answer.
//
// Errors are *errs.Error: CodeInvalidKey, CodeInvalid; CodeConflict (the
// key was canceled by another cancellation); CodeKeyMismatch,
// CodeInFlight; CodeUnavailable, CodeInternal.
func (s *Service) CancelByKey(ctx context.Context, req CancelByKeyRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	ref := idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointCancelByKey, Key: req.IdempotencyKey}
	target := idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointCreatePayment, Key: req.Key}
	fp := idemkeys.Fingerprint("cancel-by-key-v1", req.Key, req.reason())
	kc := KeyCancellation{MerchantID: req.MerchantID, Key: req.Key, CancelKey: req.IdempotencyKey, Reason: req.reason()}
	var claimed KeyCancellation
	out, err := s.run(ctx, ref, fp, [32]byte{}, func(ctx context.Context, token idemkeys.Token) (subject, *idemkeys.Response, error) {
		c, answer, err := s.store.ClaimCancellation(ctx, CancelClaim{Ref: ref, Fingerprint: fp, Token: token, Target: target}, decideCancel(kc))
		if errors.Is(err, ErrCanceledAlready) {
			err = &errs.Error{Code: errs.CodeConflict, Message: "this key was canceled already, by another cancellation: replay that one (same Idempotency-Key)"}
		}
		claimed = c
		return cancellationSubject{kc: c}, &answer, err
	})
	if err != nil || out.Replayed || claimed.Status != CancellationRequested {
		return out, err
	}
	if resp, done, err := s.FinishCancellation(ctx, claimed); err == nil && done {
		out.Response = resp
	}
	return out, nil
}

// FinishCancellation carries out a cancellation requested of a key whose
// payment exists: voids it, refunds it in full, or records that it charged
// nothing; done is false while the payment's outcome (or the void's, or
// the refund's) is not known yet. Once done, the cancellation's own key
// answers resp from then on. Safe to call again and from several replicas:
// the void and the refund run on the flow with keys derived from the
// canceled key, and the record is written only from cancel_requested.
func (s *Service) FinishCancellation(ctx context.Context, kc KeyCancellation) (resp idemkeys.Response, done bool, err error) {
	for range 2 { // a void the customer's payment beat is followed by a refund
		p, err := s.store.Payment(ctx, kc.MerchantID, kc.PaymentID)
		if err != nil {
			return resp, false, err
		}
		switch p.Status {
		case Processing, RequiresReview:
			return resp, false, nil
		case Declined, Failed:
			kc.Status, kc.Detail = CancellationCanceled, "the payment charged nothing: nothing to cancel"
		case Canceled:
			kc.Status, kc.Detail = CancellationCanceled, "the payment was canceled: nothing was charged"
			if p.PSPReference != "" && p.CancellationReason != CancelAuthorizationExpired {
				kc.Status, kc.Detail = CancellationVoided, "the payment's authorization was released at its PSP"
			}
		case RequiresConfirmation, RequiresCapture, RequiresAction:
			if !s.void(ctx, kc, p) {
				return resp, false, nil // in flight, unknown, or refused for now: later
			}
			continue // read what the void left
		case Succeeded:
			var ok bool
			if kc, ok = s.refundAll(ctx, kc, p); !ok {
				return resp, false, nil
			}
		default:
			return resp, false, fmt.Errorf("payments: payment %s is %s", p.ID, p.Status)
		}
		if kc.Status == CancellationRefunded || kc.Status == CancellationReview {
			// Shown as the refund left it.
			if after, err := s.store.Payment(ctx, kc.MerchantID, kc.PaymentID); err == nil {
				p = after
			}
		}
		resp = renderCancellation(kc, &p)
		err = s.store.FinishCancellation(ctx, kc, resp)
		if errors.Is(err, idemkeys.ErrFenced) {
			return resp, false, nil // finished by another
		}
		return resp, err == nil, err
	}
	return resp, false, nil
}

// refundAll refunds all that p took, for kc, on the flow, and reports
// whether that is done (refunded, or, when it cannot be, in review): each
// refund takes what no other refund holds, under a key derived from the
// canceled key and numbered, so that a refund refused (or proven never
// sent) is followed by the next, and one made while the merchant's own
// refunds were pending by another once they settle; false while a refund
// (its own or another) is pending, unknown or in review.
func (s *Service) refundAll(ctx context.Context, kc KeyCancellation, p Payment) (KeyCancellation, bool) {
	if p.Captured() <= 0 {
		kc.Status, kc.Detail = CancellationReview, "the payment is recorded succeeded but took nothing the gateway knows of: ops decide"
		return kc, true
	}
	for n := range maxVoids {
		key := derivedKey(kc)
		if n > 0 {
			key += "_r" + strconv.Itoa(n)
		}
		out, err := s.CreateRefund(ctx, RefundRequest{MerchantID: kc.MerchantID, PaymentID: p.ID, IdempotencyKey: key,
			Reason: "canceled by key (" + kc.Reason + ")"})
		after, rerr := s.store.Payment(ctx, kc.MerchantID, p.ID)
		switch {
		case rerr != nil:
			return kc, false
		case after.AmountRefunded >= after.Captured():
			kc.Status, kc.Detail = CancellationRefunded, "the payment took money: refunded in full"
			if err == nil {
				kc.RefundID = out.SubjectID
			}
			return kc, true
		case err != nil, out.Response.Status == http.StatusAccepted:
			return kc, false // others hold the rest (pending), or this one is pending or unknown
		case out.Response.Status == http.StatusCreated:
			kc.RefundID = out.SubjectID
			if after.AmountReserved > after.AmountRefunded {
				return kc, false // part of it: the rest waits for the others pending
			}
			// The others released what they held: the next key takes it.
		}
		// Refused (402), or the rest released: the next key goes on.
	}
	kc.Status, kc.Detail = CancellationReview, "the payment took money and its PSP refused every refund: ops decide"
	return kc, true
}

// maxVoids bounds the voids (and refunds) a cancellation makes of its payment.
const maxVoids = 5

// void voids p for kc on the flow, and reports whether a void of it
// settled (voided, or beaten by the customer's payment). Its keys are
// derived from the canceled key, numbered: a void that ended without
// voiding (the PSP refused it, or the reconciler proved it never sent)
// replays that for ever, so the next attempt takes the next key, up to
// maxVoids; a void in flight or unknown is waited for, never passed by.
func (s *Service) void(ctx context.Context, kc KeyCancellation, p Payment) bool {
	fp := CancelRequest{PaymentID: p.ID, Reason: kc.Reason}.Fingerprint()
	for n := range maxVoids {
		key := derivedKey(kc)
		if n > 0 {
			key += "_" + strconv.Itoa(n)
		}
		out, err := s.operate(ctx, kc.MerchantID, p.ID, Operation{Kind: OpVoid, Key: key, Reason: kc.Reason}, fp)
		if err != nil {
			return false
		}
		if out.Response.Status != http.StatusPaymentRequired {
			return true
		}
		var v View
		if json.Unmarshal(out.Response.Body, &v) != nil || (v.Status != RequiresCapture && v.Status != RequiresAction && v.Status != RequiresConfirmation) {
			return true // another outcome won: the payment is read again
		}
	}
	return false
}

// cancellationSubject is a cancellation as the flow sees it: its key is
// completed at its claim, so it is never sent, looked up or settled.
type cancellationSubject struct{ kc KeyCancellation }

func (c cancellationSubject) kind() Kind         { return KindCancellation }
func (c cancellationSubject) id() string         { return c.kc.PaymentID }
func (c cancellationSubject) pspName() string    { return "" }
func (c cancellationSubject) created() time.Time { return c.kc.CreatedAt }
func (c cancellationSubject) status() string     { return string(c.kc.Status) }
func (c cancellationSubject) send(context.Context, psp.Adapter) (answer, error) {
	return answer{}, errors.New("payments: a cancellation sends nothing")
}
func (c cancellationSubject) lookup(context.Context, psp.Adapter) (answer, error) {
	return answer{}, errors.New("payments: a cancellation looks nothing up")
}
func (c cancellationSubject) rejected(string) subject { return c }
func (c cancellationSubject) orderTaken() subject     { return c }
func (c cancellationSubject) settle(context.Context, FlowStore, idemkeys.Ref, idemkeys.Token) (idemkeys.Response, error) {
	return idemkeys.Response{}, errors.New("payments: a cancellation is settled at its claim")
}
func (c cancellationSubject) recorded(Observer) {}
