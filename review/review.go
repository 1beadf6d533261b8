// Package review is what an operator decides about payments and refunds:
// their records, and resolutions (of those in review, or forced
// corrections), each checked against the PSP's own evidence first.
package review

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

// Store is what ops' administration of payments and refunds reads and writes.
type Store interface {
	// FindPayments lists up to f.Limit payments matching f across merchants,
	// oldest first.
	FindPayments(ctx context.Context, f PaymentFilter) ([]payments.Payment, error)
	// PaymentRecord returns the payment with id, whatever its merchant, with
	// its resolutions and its key's record (nil once purged). errs.ErrNotFound for
	// an unknown id.
	PaymentRecord(ctx context.Context, id string) (PaymentRecord, error)
	// PaymentByID reads a payment by its id alone; errs.ErrNotFound otherwise.
	PaymentByID(ctx context.Context, id string) (payments.Payment, error)
	// FindRefunds lists refunds across merchants, oldest first, by f.
	FindRefunds(ctx context.Context, f RefundFilter) ([]payments.Refund, error)
	// RefundByID reads a refund by its id alone; errs.ErrNotFound otherwise.
	RefundByID(ctx context.Context, id string) (payments.Refund, error)
	// ResolveRefund applies decide to the refund with id under its and its
	// payment's row locks, moves the payment's amounts with it, rewrites its
	// key's answer when it leaves review, and records res in the audit
	// table, all in one transaction. errs.ErrNotFound for an unknown id.
	ResolveRefund(ctx context.Context, id string, decide func(before payments.Refund, dbNow time.Time) (payments.RefundChange, error), res payments.Resolution) (payments.Refund, error)
	// Resolve applies decide to the payment with id under a row lock, stores
	// the result, rewrites its key's stored response and records res in the
	// audit table, all in one transaction. errs.ErrNotFound for an unknown id.
	Resolve(ctx context.Context, id string, decide func(before payments.Payment, dbNow time.Time) (payments.PaymentChange, error), res payments.Resolution) (payments.Payment, error)
}

// Config tunes administration.
type Config struct {
	// Now stamps keys and audit rows; time.Now when nil.
	Now func() time.Time
	// Logger receives every manual resolution; nil discards.
	Logger *slog.Logger
	// Hasher names keys and merchants in logs.
	Hasher *idemkeys.Hasher
	// PSPs are asked before an operator's decision is recorded; a payment
	// whose PSP is not among them can only be resolved with Force.
	PSPs *payments.PSPs
	// PSPTimeout bounds that lookup (DefaultPSPTimeout when zero).
	PSPTimeout time.Duration
}

// Admin is ops' administration of payments and refunds: listings across
// merchants, and operators' decisions on payments and refunds nobody could
// settle. It never charges.
type Admin struct {
	store      Store
	now        func() time.Time
	log        *slog.Logger
	hash       *idemkeys.Hasher
	psps       *payments.PSPs
	pspTimeout time.Duration
}

// New returns an Admin over store.
func New(store Store, cfg Config) *Admin {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Hasher == nil {
		cfg.Hasher = idemkeys.NewHasher(nil)
	}
	if cfg.PSPs == nil {
		cfg.PSPs = &payments.PSPs{}
	}
	if cfg.PSPTimeout <= 0 {
		cfg.PSPTimeout = payments.DefaultPSPTimeout
	}
	return &Admin{store: store, now: cfg.Now, log: cfg.Logger, hash: cfg.Hasher, psps: cfg.PSPs, pspTimeout: cfg.PSPTimeout}
}

// Resolve records an operator's decision on a payment in requires_review,
// or, with Force, corrects the outcome of a settled one. It asks the
// payment's own PSP first and refuses a decision the PSP's answer
// contradicts — "failed" while the PSP holds the charge, "succeeded" while
// it declined the charge or authoritatively has none — and any decision
// when the PSP cannot be asked; Force records it anyway, and Reason says
// why. The decision, the PSP's answer, the operator and the reason are kept
// in the audit table and logged; the payment's key, if still retained,
// replays the resolved payment from then on.
func (a *Admin) Resolve(ctx context.Context, r payments.Resolution) (payments.Payment, error) {
	if err := r.Validate(); err != nil {
		return payments.Payment{}, err
	}
	current, err := a.store.PaymentByID(ctx, r.PaymentID)
	if errors.Is(err, errs.ErrNotFound) {
		return payments.Payment{}, errs.Errorf(errs.CodeNotFound, "no payment %s", r.PaymentID)
	}
	if err != nil {
		return payments.Payment{}, errs.Internal(fmt.Errorf("resolve %s: %w", r.PaymentID, err))
	}
	evidence := a.evidence(ctx, current, r)
	if evidence.refuse != "" && !r.Force {
		return payments.Payment{}, errs.Errorf(errs.CodeConflict, "%s; if you are sure, resolve again with --force and say why in --reason", evidence.refuse)
	}
	r.Reason = r.Reason + " [PSP: " + evidence.said + "]"
	if len(r.Reason) > 1000 {
		r.Reason = r.Reason[:1000]
	}
	p, err := a.store.Resolve(ctx, r.PaymentID, payments.ChangePayment(func(p payments.Payment) (payments.Payment, error) {
		r.From = p.Status
		switch {
		case p.Operation != nil:
			return p, errs.Errorf(errs.CodeConflict, "payment %s has a %s in flight: it settles it; look again once it has", p.ID, p.Operation.Kind)
		case p.Status == payments.RequiresReview:
		case r.Force && p.Status.Final():
			// A correction of an earlier outcome, audited like any decision.
		case p.Status.Final():
			return p, errs.Errorf(errs.CodeConflict, "payment %s is already %s; correcting a settled payment needs --force and a reason", p.ID, p.Status)
		default:
			return p, errs.Errorf(errs.CodeConflict, "payment %s is %s: the payment flow or the reconciler is still settling it", p.ID, p.Status)
		}
		p.Status, p.ReviewReason = r.To, ""
		switch {
		case r.PSPReference != "":
			p.PSPReference = r.PSPReference
		case r.To == payments.Succeeded && evidence.charge.Reference != "":
			p.PSPReference = evidence.charge.Reference
		}
		p.DeclineCode = ""
		if r.To == payments.Failed {
			p.DeclineCode = payments.DeclineNotProcessed
		}
		if p.Manual() && r.To == payments.Succeeded {
			// What the capture took, as the PSP says (all of it when it
			// does not, or when the operator forces it).
			p.AmountCaptured, p.CaptureBefore = evidence.settled.AmountCaptured, time.Time{}
			if p.AmountCaptured <= 0 || p.AmountCaptured > p.Amount.Minor {
				p.AmountCaptured = p.Amount.Minor
			}
		}
		return p, nil
	}), r)
	if errors.Is(err, errs.ErrNotFound) {
		return payments.Payment{}, errs.Errorf(errs.CodeNotFound, "no payment %s", r.PaymentID)
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return payments.Payment{}, e
	}
	if err != nil {
		return payments.Payment{}, errs.Internal(fmt.Errorf("resolve %s: %w", r.PaymentID, err))
	}
	a.log.InfoContext(ctx, "payment resolved by hand", "payment_id", p.ID, a.hash.Attr(idemkeys.Ref{
		MerchantID: p.MerchantID, Endpoint: payments.EndpointCreatePayment, Key: p.IdempotencyKey,
	}), "from", string(r.From), "to", string(p.Status), "forced", r.Force, "psp_said", evidence.said,
		"actor", r.Actor, "reason", r.Reason)
	return p, nil
}

// evidence is what the payment's PSP says about a decision.
type evidence struct {
	said   string // for the audit trail
	refuse string // why the decision contradicts the PSP; empty when it does not
	charge psp.Charge
	// settled is the payment as the PSP's charge would leave it.
	settled payments.Payment
}

func (a *Admin) evidence(ctx context.Context, p payments.Payment, r payments.Resolution) evidence {
	adapter, ok := a.psps.For(p.PSP)
	if !ok {
		e := fmt.Sprintf("not asked: PSP %q is not configured here", p.PSP)
		return evidence{said: e, refuse: "the payment's PSP cannot be asked (" + e + ")"}
	}
	lctx, cancel := context.WithTimeout(ctx, a.pspTimeout)
	c, err := adapter.Lookup(lctx, p.MerchantOrderID)
	cancel()
	caps := adapter.Capabilities()
	switch {
	case errors.Is(err, psp.ErrNotFound) && caps.AuthoritativeLookup:
		ev := evidence{said: "no charge for this order"}
		if r.To == payments.Succeeded {
			ev.refuse = "the PSP says it holds no charge for this payment"
		}
		return ev
	case err != nil:
		e := "no authoritative answer: " + err.Error()
		if errors.Is(err, psp.ErrNotFound) {
			e = "not found, but its lookups are not authoritative"
		}
		return evidence{said: e, refuse: "the PSP gave " + e}
	}
	settled, err := payments.ApplyCharge(p, c)
	ev := evidence{charge: c, said: fmt.Sprintf("charge %s %s, %d %s", c.Reference, c.Status, c.Amount, c.Currency)}
	switch {
	case err != nil:
		ev.refuse = "the PSP's answer is unreadable (" + err.Error() + ")"
	case settled.Status == payments.RequiresReview:
		ev.refuse = settled.ReviewReason
	case settled.Status == payments.Succeeded && r.To == payments.Failed:
		ev.refuse = "the PSP holds a successful charge " + c.Reference + " for this payment"
	case settled.Status == payments.Declined && r.To == payments.Succeeded:
		ev.refuse = "the PSP declined this payment's charge"
	case p.Manual() && r.To == payments.Succeeded && settled.Status != payments.Succeeded:
		ev.refuse = "the PSP holds this authorization " + string(c.Status) + ", not captured"
	}
	ev.settled = settled
	return ev
}

// PaymentFilter selects payments for ops; a zero field selects everything.
type PaymentFilter struct {
	Status     payments.Status
	MerchantID string
	// Since keeps the payments created at or after it.
	Since time.Time
	// Limit bounds the listing, 1 … MaxListLimit.
	Limit int
}

// MaxListLimit bounds one listing, so an ops command cannot pull a whole table.
const MaxListLimit = 10_000

// ResolutionRecord is one operator's decision as the audit table keeps it.
type ResolutionRecord struct {
	ID           string
	From, To     payments.Status
	PSPReference string
	Reason       string
	Actor        string
	At           time.Time
}

// PaymentRecord is a payment with what ops need to judge it.
type PaymentRecord struct {
	Payment payments.Payment
	// Resolutions are the operators' decisions on it, oldest first.
	Resolutions []ResolutionRecord
	// Key is the record of the idempotency key that created it; nil once
	// the key was purged after retention.
	Key *idemkeys.Record
}

// Payments lists payments across merchants, oldest first; more reports
// that further payments match beyond f.Limit.
func (a *Admin) Payments(ctx context.Context, f PaymentFilter) (ps []payments.Payment, more bool, err error) {
	var fields []errs.FieldError
	if f.Status != "" && !slices.Contains(payments.Statuses, f.Status) {
		fields = append(fields, errs.FieldError{Field: "status", Reason: "must be " + payments.StatusNames()})
	}
	if f.Limit < 1 || f.Limit > MaxListLimit {
		fields = append(fields, errs.FieldError{Field: "limit", Reason: fmt.Sprintf("must be 1 to %d", MaxListLimit)})
	}
	if len(fields) > 0 {
		return nil, false, &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing", Fields: fields}
	}
	limit := f.Limit
	f.Limit++ // one more tells whether there are more
	ps, err = a.store.FindPayments(ctx, f)
	if err != nil {
		return nil, false, errs.Internal(fmt.Errorf("list payments: %w", err))
	}
	if len(ps) > limit {
		return ps[:limit], true, nil
	}
	return ps, false, nil
}

// PaymentRecord returns a payment by id alone (ops look across merchants),
// with its resolution history and its key's state.
func (a *Admin) PaymentRecord(ctx context.Context, id string) (PaymentRecord, error) {
	rec, err := a.store.PaymentRecord(ctx, id)
	if errors.Is(err, errs.ErrNotFound) {
		return PaymentRecord{}, errs.Errorf(errs.CodeNotFound, "no payment %s", id)
	}
	if err != nil {
		return PaymentRecord{}, errs.Internal(fmt.Errorf("payment %s: %w", id, err))
	}
	return rec, nil
}

// RefundResolution is an operator's decision on a refund nobody could settle.
type RefundResolution struct {
	RefundID     string
	To           payments.RefundStatus
	PSPReference string
	Reason       string
	Actor        string
	// Force records the decision against the PSP's evidence, or corrects an
	// earlier one; Reason must say why.
	Force bool
}

// ResolveRefund records an operator's decision on a refund in review (or,
// with Force, corrects a settled one), after asking its PSP, like Resolve:
// "failed" is refused while the PSP holds the refund, "succeeded" while the
// PSP refused it or authoritatively has none. A failed refund gives its
// reservation back to the payment; a succeeded one counts as refunded.
func (a *Admin) ResolveRefund(ctx context.Context, r RefundResolution) (payments.Refund, error) {
	res := payments.Resolution{PaymentID: r.RefundID, To: payments.Status(r.To), PSPReference: r.PSPReference, Reason: r.Reason, Actor: r.Actor, Force: r.Force}
	if r.To != payments.RefundSucceeded && r.To != payments.RefundFailed {
		return payments.Refund{}, &errs.Error{Code: errs.CodeInvalid, Message: "invalid resolution", Fields: []errs.FieldError{{Field: "as", Reason: "must be succeeded or failed"}}}
	}
	res.To = payments.Succeeded // validated as a payment decision; the refund's status is r.To
	if err := res.Validate(); err != nil {
		return payments.Refund{}, err
	}
	current, err := a.store.RefundByID(ctx, r.RefundID)
	if errors.Is(err, errs.ErrNotFound) {
		return payments.Refund{}, errs.Errorf(errs.CodeNotFound, "no refund %s", r.RefundID)
	}
	if err != nil {
		return payments.Refund{}, errs.Internal(fmt.Errorf("resolve refund %s: %w", r.RefundID, err))
	}
	said, refuse, found := a.refundEvidence(ctx, current, r.To)
	if refuse != "" && !r.Force {
		return payments.Refund{}, errs.Errorf(errs.CodeConflict, "%s; if you are sure, resolve again with --force and say why in --reason", refuse)
	}
	res.Reason = r.Reason + " [PSP: " + said + "]"
	if len(res.Reason) > 1000 {
		res.Reason = res.Reason[:1000]
	}
	var from payments.RefundStatus
	out, err := a.store.ResolveRefund(ctx, r.RefundID, payments.ChangeRefund(func(x payments.Refund) (payments.Refund, error) {
		from = x.Status
		switch {
		case x.Status == payments.RefundRequiresReview:
		case r.Force && (x.Status == payments.RefundSucceeded || x.Status == payments.RefundFailed):
		case x.Status == payments.RefundSucceeded || x.Status == payments.RefundFailed:
			return x, errs.Errorf(errs.CodeConflict, "refund %s is already %s; correcting a settled refund needs --force and a reason", x.ID, x.Status)
		default:
			return x, errs.Errorf(errs.CodeConflict, "refund %s is %s: the refund flow or the reconciler is still settling it", x.ID, x.Status)
		}
		x.Status, x.ReviewReason = r.To, ""
		switch {
		case r.PSPReference != "":
			x.PSPReference = r.PSPReference
		case r.To == payments.RefundSucceeded && found.Reference != "":
			x.PSPReference = found.Reference
		}
		x.FailureCode = ""
		if r.To == payments.RefundFailed {
			x.FailureCode = payments.RefundFailedNotProcessed
		}
		return x, nil
	}), res)
	if errors.Is(err, errs.ErrNotFound) {
		return payments.Refund{}, errs.Errorf(errs.CodeNotFound, "no refund %s", r.RefundID)
	}
	if errors.Is(err, payments.ErrExceedsPayment) {
		return payments.Refund{}, errs.Errorf(errs.CodeConflict, "refund %s cannot be %s: its payment's other refunds reserve what it would need again; resolve those first", r.RefundID, r.To)
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return payments.Refund{}, e
	}
	if err != nil {
		return payments.Refund{}, errs.Internal(fmt.Errorf("resolve refund %s: %w", r.RefundID, err))
	}
	a.log.InfoContext(ctx, "refund resolved by hand", "refund_id", out.ID, "payment_id", out.PaymentID,
		a.hash.Attr(idemkeys.Ref{MerchantID: out.MerchantID, Endpoint: payments.EndpointCreateRefund, Key: out.IdempotencyKey}),
		"from", string(from), "to", string(out.Status), "forced", r.Force, "psp_said", said, "actor", r.Actor, "reason", r.Reason)
	return out, nil
}

// refundEvidence is what the refund's PSP says about a decision.
func (a *Admin) refundEvidence(ctx context.Context, x payments.Refund, to payments.RefundStatus) (said, refuse string, found psp.Refund) {
	adapter, ok := a.psps.For(x.PSP)
	if !ok {
		said = fmt.Sprintf("not asked: PSP %q is not configured here", x.PSP)
		return said, "the refund's PSP cannot be asked (" + said + ")", psp.Refund{}
	}
	p, err := a.store.PaymentByID(ctx, x.PaymentID)
	if err != nil {
		return "not asked: " + err.Error(), "the refund's payment cannot be read", psp.Refund{}
	}
	lctx, cancel := context.WithTimeout(ctx, a.pspTimeout)
	got, err := adapter.LookupRefund(lctx, p.PSPReference, x.RefundOrderID)
	cancel()
	switch {
	case errors.Is(err, psp.ErrNotFound) && adapter.Capabilities().AuthoritativeLookup:
		if to == payments.RefundSucceeded {
			return "no refund for this order", "the PSP says it holds no such refund", psp.Refund{}
		}
		return "no refund for this order", "", psp.Refund{}
	case err != nil:
		e := "no authoritative answer: " + err.Error()
		return e, "the PSP gave " + e, psp.Refund{}
	}
	settled, err := payments.ApplyRefund(x, got)
	said = fmt.Sprintf("refund %s %s, %d %s", got.Reference, got.Status, got.Amount, got.Currency)
	switch {
	case err != nil:
		return said, "the PSP's answer is unreadable (" + err.Error() + ")", got
	case settled.Status == payments.RefundRequiresReview:
		return said, settled.ReviewReason, got
	case settled.Status == payments.RefundSucceeded && to == payments.RefundFailed, settled.Status == payments.RefundPending && to == payments.RefundFailed:
		return said, "the PSP holds this refund (" + string(got.Status) + ")", got
	case settled.Status == payments.RefundFailed && to == payments.RefundSucceeded:
		return said, "the PSP refused this refund", got
	}
	return said, "", got
}

// RefundFilter narrows ops' listing of refunds.
type RefundFilter struct {
	Status     payments.RefundStatus
	MerchantID string
	PaymentID  string
	// Limit bounds the listing, 1 … MaxListLimit.
	Limit int
}

// Refunds lists refunds across merchants, oldest first, for ops; more
// says whether more match than the limit.
func (a *Admin) Refunds(ctx context.Context, f RefundFilter) (rs []payments.Refund, more bool, err error) {
	var fields []errs.FieldError
	if f.Status != "" && !slices.Contains(payments.RefundStatuses, string(f.Status)) {
		fields = append(fields, errs.FieldError{Field: "status", Reason: "must be one of pending, succeeded, failed, requires_review"})
	}
	if f.Limit < 1 || f.Limit > MaxListLimit {
		fields = append(fields, errs.FieldError{Field: "limit", Reason: fmt.Sprintf("must be 1 to %d", MaxListLimit)})
	}
	if len(fields) > 0 {
		return nil, false, &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing", Fields: fields}
	}
	limit := f.Limit
	f.Limit++
	rs, err = a.store.FindRefunds(ctx, f)
	if err != nil {
		return nil, false, errs.Internal(fmt.Errorf("list refunds: %w", err))
	}
	if len(rs) > limit {
		return rs[:limit], true, nil
	}
	return rs, false, nil
}
