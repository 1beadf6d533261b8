package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp"
)

// AdminStore is what ops' administration of payments and refunds reads and writes.
type AdminStore interface {
	// FindPayments lists up to f.Limit payments matching f across merchants,
	// oldest first.
	FindPayments(ctx context.Context, f PaymentFilter) ([]Payment, error)
	// PaymentRecord returns the payment with id, whatever its merchant, with
	// its resolutions and its key's record (nil once purged). errs.ErrNotFound for
	// an unknown id.
	PaymentRecord(ctx context.Context, id string) (PaymentRecord, error)
	// PaymentByID reads a payment by its id alone; errs.ErrNotFound otherwise.
	PaymentByID(ctx context.Context, id string) (Payment, error)
	// FindRefunds lists refunds across merchants, oldest first, by f.
	FindRefunds(ctx context.Context, f RefundFilter) ([]Refund, error)
	// RefundByID reads a refund by its id alone; errs.ErrNotFound otherwise.
	RefundByID(ctx context.Context, id string) (Refund, error)
	// ResolveRefund applies decide to the refund with id under its and its
	// payment's row locks, moves the payment's amounts with it, rewrites its
	// key's answer when it leaves review, and records res in the audit
	// table, all in one transaction. errs.ErrNotFound for an unknown id.
	ResolveRefund(ctx context.Context, id string, decide func(before Refund, dbNow time.Time) (RefundChange, error), res Resolution) (Refund, error)
	// Resolve applies decide to the payment with id under a row lock, stores
	// the result, rewrites its key's stored response and records res in the
	// audit table, all in one transaction. errs.ErrNotFound for an unknown id.
	Resolve(ctx context.Context, id string, decide func(before Payment, dbNow time.Time) (PaymentChange, error), res Resolution) (Payment, error)
}

// AdminConfig tunes administration.
type AdminConfig struct {
	// Now stamps keys and audit rows; time.Now when nil.
	Now func() time.Time
	// Logger receives every manual resolution; nil discards.
	Logger *slog.Logger
	// Hasher names keys and merchants in logs.
	Hasher *idemkeys.Hasher
	// PSPs are asked before an operator's decision is recorded; a payment
	// whose PSP is not among them can only be resolved with Force.
	PSPs *PSPs
	// PSPTimeout bounds that lookup (DefaultPSPTimeout when zero).
	PSPTimeout time.Duration
}

// Admin is ops' administration of payments and refunds: listings across
// merchants, and operators' decisions on payments and refunds nobody could
// settle. It never charges.
type Admin struct {
	store      AdminStore
	now        func() time.Time
	log        *slog.Logger
	hash       *idemkeys.Hasher
	psps       *PSPs
	pspTimeout time.Duration
}

// NewAdmin returns an Admin over store.
func NewAdmin(store AdminStore, cfg AdminConfig) *Admin {
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
		cfg.PSPs = &PSPs{}
	}
	if cfg.PSPTimeout <= 0 {
		cfg.PSPTimeout = DefaultPSPTimeout
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
func (a *Admin) Resolve(ctx context.Context, r Resolution) (Payment, error) {
	if err := r.Validate(); err != nil {
		return Payment{}, err
	}
	current, err := a.store.PaymentByID(ctx, r.PaymentID)
	if errors.Is(err, errs.ErrNotFound) {
		return Payment{}, errs.Errorf(errs.CodeNotFound, "no payment %s", r.PaymentID)
	}
	if err != nil {
		return Payment{}, errs.Internal(fmt.Errorf("resolve %s: %w", r.PaymentID, err))
	}
	evidence := a.evidence(ctx, current, r)
	if evidence.refuse != "" && !r.Force {
		return Payment{}, errs.Errorf(errs.CodeConflict, "%s; if you are sure, resolve again with --force and say why in --reason", evidence.refuse)
	}
	r.Reason = r.Reason + " [PSP: " + evidence.said + "]"
	if len(r.Reason) > 1000 {
		r.Reason = r.Reason[:1000]
	}
	p, err := a.store.Resolve(ctx, r.PaymentID, ChangePayment(func(p Payment) (Payment, error) {
		r.From = p.Status
		switch {
		case p.Status == RequiresReview:
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
		case r.To == Succeeded && evidence.charge.Reference != "":
			p.PSPReference = evidence.charge.Reference
		}
		p.DeclineCode = ""
		if r.To == Failed {
			p.DeclineCode = DeclineNotProcessed
		}
		return p, nil
	}), r)
	if errors.Is(err, errs.ErrNotFound) {
		return Payment{}, errs.Errorf(errs.CodeNotFound, "no payment %s", r.PaymentID)
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return Payment{}, e
	}
	if err != nil {
		return Payment{}, errs.Internal(fmt.Errorf("resolve %s: %w", r.PaymentID, err))
	}
	a.log.InfoContext(ctx, "payment resolved by hand", "payment_id", p.ID, a.hash.Attr(idemkeys.Ref{
		MerchantID: p.MerchantID, Endpoint: EndpointCreatePayment, Key: p.IdempotencyKey,
	}), "from", string(r.From), "to", string(p.Status), "forced", r.Force, "psp_said", evidence.said,
		"actor", r.Actor, "reason", r.Reason)
	return p, nil
}

// evidence is what the payment's PSP says about a decision.
type evidence struct {
	said   string // for the audit trail
	refuse string // why the decision contradicts the PSP; empty when it does not
	charge psp.Charge
}

func (a *Admin) evidence(ctx context.Context, p Payment, r Resolution) evidence {
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
		if r.To == Succeeded {
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
	settled, err := ApplyCharge(p, c)
	ev := evidence{charge: c, said: fmt.Sprintf("charge %s %s, %d %s", c.Reference, c.Status, c.Amount, c.Currency)}
	switch {
	case err != nil:
		ev.refuse = "the PSP's answer is unreadable (" + err.Error() + ")"
	case settled.Status == RequiresReview:
		ev.refuse = settled.ReviewReason
	case settled.Status == Succeeded && r.To == Failed:
		ev.refuse = "the PSP holds a successful charge " + c.Reference + " for this payment"
	case settled.Status == Declined && r.To == Succeeded:
		ev.refuse = "the PSP declined this payment's charge"
	}
	return ev
}

// Statuses lists every status in the order of a payment's life.
var Statuses = []Status{RequiresConfirmation, Processing, RequiresAction, RequiresCapture, Succeeded, Declined, Failed, Canceled, RequiresReview}

// StatusNames lists Statuses for messages: "a, b or c".
func StatusNames() string {
	names := make([]string, len(Statuses))
	for i, s := range Statuses {
		names[i] = string(s)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// PaymentFilter selects payments for ops; a zero field selects everything.
type PaymentFilter struct {
	Status     Status
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
	From, To     Status
	PSPReference string
	Reason       string
	Actor        string
	At           time.Time
}

// PaymentRecord is a payment with what ops need to judge it.
type PaymentRecord struct {
	Payment Payment
	// Resolutions are the operators' decisions on it, oldest first.
	Resolutions []ResolutionRecord
	// Key is the record of the idempotency key that created it; nil once
	// the key was purged after retention.
	Key *idemkeys.Record
}

// Payments lists payments across merchants, oldest first; more reports
// that further payments match beyond f.Limit.
func (a *Admin) Payments(ctx context.Context, f PaymentFilter) (ps []Payment, more bool, err error) {
	var fields []errs.FieldError
	if f.Status != "" && !slices.Contains(Statuses, f.Status) {
		fields = append(fields, errs.FieldError{Field: "status", Reason: "must be " + StatusNames()})
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
	To           RefundStatus
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
func (a *Admin) ResolveRefund(ctx context.Context, r RefundResolution) (Refund, error) {
	res := Resolution{PaymentID: r.RefundID, To: Status(r.To), PSPReference: r.PSPReference, Reason: r.Reason, Actor: r.Actor, Force: r.Force}
	if r.To != RefundSucceeded && r.To != RefundFailed {
		return Refund{}, &errs.Error{Code: errs.CodeInvalid, Message: "invalid resolution", Fields: []errs.FieldError{{Field: "as", Reason: "must be succeeded or failed"}}}
	}
	res.To = Succeeded // validated as a payment decision; the refund's status is r.To
	if err := res.Validate(); err != nil {
		return Refund{}, err
	}
	current, err := a.store.RefundByID(ctx, r.RefundID)
	if errors.Is(err, errs.ErrNotFound) {
		return Refund{}, errs.Errorf(errs.CodeNotFound, "no refund %s", r.RefundID)
	}
	if err != nil {
		return Refund{}, errs.Internal(fmt.Errorf("resolve refund %s: %w", r.RefundID, err))
	}
	said, refuse, found := a.refundEvidence(ctx, current, r.To)
	if refuse != "" && !r.Force {
		return Refund{}, errs.Errorf(errs.CodeConflict, "%s; if you are sure, resolve again with --force and say why in --reason", refuse)
	}
	res.Reason = r.Reason + " [PSP: " + said + "]"
	if len(res.Reason) > 1000 {
		res.Reason = res.Reason[:1000]
	}
	var from RefundStatus
	out, err := a.store.ResolveRefund(ctx, r.RefundID, ChangeRefund(func(x Refund) (Refund, error) {
		from = x.Status
		switch {
		case x.Status == RefundRequiresReview:
		case r.Force && (x.Status == RefundSucceeded || x.Status == RefundFailed):
		case x.Status == RefundSucceeded || x.Status == RefundFailed:
			return x, errs.Errorf(errs.CodeConflict, "refund %s is already %s; correcting a settled refund needs --force and a reason", x.ID, x.Status)
		default:
			return x, errs.Errorf(errs.CodeConflict, "refund %s is %s: the refund flow or the reconciler is still settling it", x.ID, x.Status)
		}
		x.Status, x.ReviewReason = r.To, ""
		switch {
		case r.PSPReference != "":
			x.PSPReference = r.PSPReference
		case r.To == RefundSucceeded && found.Reference != "":
			x.PSPReference = found.Reference
		}
		x.FailureCode = ""
		if r.To == RefundFailed {
			x.FailureCode = RefundFailedNotProcessed
		}
		return x, nil
	}), res)
	if errors.Is(err, errs.ErrNotFound) {
		return Refund{}, errs.Errorf(errs.CodeNotFound, "no refund %s", r.RefundID)
	}
	if errors.Is(err, ErrExceedsPayment) {
		return Refund{}, errs.Errorf(errs.CodeConflict, "refund %s cannot be %s: its payment's other refunds reserve what it would need again; resolve those first", r.RefundID, r.To)
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return Refund{}, e
	}
	if err != nil {
		return Refund{}, errs.Internal(fmt.Errorf("resolve refund %s: %w", r.RefundID, err))
	}
	a.log.InfoContext(ctx, "refund resolved by hand", "refund_id", out.ID, "payment_id", out.PaymentID,
		a.hash.Attr(idemkeys.Ref{MerchantID: out.MerchantID, Endpoint: EndpointCreateRefund, Key: out.IdempotencyKey}),
		"from", string(from), "to", string(out.Status), "forced", r.Force, "psp_said", said, "actor", r.Actor, "reason", r.Reason)
	return out, nil
}

// refundEvidence is what the refund's PSP says about a decision.
func (a *Admin) refundEvidence(ctx context.Context, x Refund, to RefundStatus) (said, refuse string, found psp.Refund) {
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
		if to == RefundSucceeded {
			return "no refund for this order", "the PSP says it holds no such refund", psp.Refund{}
		}
		return "no refund for this order", "", psp.Refund{}
	case err != nil:
		e := "no authoritative answer: " + err.Error()
		return e, "the PSP gave " + e, psp.Refund{}
	}
	settled, err := ApplyRefund(x, got)
	said = fmt.Sprintf("refund %s %s, %d %s", got.Reference, got.Status, got.Amount, got.Currency)
	switch {
	case err != nil:
		return said, "the PSP's answer is unreadable (" + err.Error() + ")", got
	case settled.Status == RefundRequiresReview:
		return said, settled.ReviewReason, got
	case settled.Status == RefundSucceeded && to == RefundFailed, settled.Status == RefundPending && to == RefundFailed:
		return said, "the PSP holds this refund (" + string(got.Status) + ")", got
	case settled.Status == RefundFailed && to == RefundSucceeded:
		return said, "the PSP refused this refund", got
	}
	return said, "", got
}

// RefundFilter narrows ops' listing of refunds.
type RefundFilter struct {
	Status     RefundStatus
	MerchantID string
	PaymentID  string
	// Limit bounds the listing, 1 … MaxListLimit.
	Limit int
}

// Refunds lists refunds across merchants, oldest first, for ops; more
// says whether more match than the limit.
func (a *Admin) Refunds(ctx context.Context, f RefundFilter) (rs []Refund, more bool, err error) {
	var fields []errs.FieldError
	if f.Status != "" && !slices.Contains(RefundStatuses, string(f.Status)) {
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
