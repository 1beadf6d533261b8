// Package notices acts on what a PSP says happened (its notifications,
// webhooks): it settles payments and refunds sooner than the reconciler
// polls, by the same rules.
package notices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

// PSP notifications (webhooks) settle payments and refunds sooner than the
// reconciler's polling, exactly as the reconciler would: what a
// notification says is read by the PSP's adapter, which verifies it or
// fetches the truth from the PSP; each charge or refund it names is then
// checked against the gateway's own record with the rules every settlement
// uses (ApplyCharge, ApplyRefund), and written with the same compare-and-set
// on the status, with an audit row. A payment or refund whose key a worker
// holds is not fought over: its key's next reconciler look becomes due now,
// and the lease holder or the reconciler settles it. Nothing is guessed: a
// notification for an order the gateway does not know, or for a payment
// another PSP holds, is acknowledged and logged, and changes nothing.
// Receiving one twice, or out of order, changes nothing more.
//
// A PSP that reports money moved for a payment or refund the gateway holds
// as final without it (a charge succeeded for a payment recorded declined,
// failed or canceled; a refund succeeded that is recorded failed), or holds
// something else under its order id, contradicts the gateway's answer: the
// subject goes to requires_review with the PSP's evidence in its audit row,
// an event and a count (Observer.Contradicted), and the review queue or a
// person settles it from there; its key's answer follows. A report that
// money did not move for a subject recorded as having moved it (a failure
// notice after a success, as an earlier attempt's may arrive late) moves no
// money back and changes nothing; it is logged and counted.

// Store is what settling from a PSP's notification reads and writes.
type Store interface {
	// PaymentsByOrder reads the payments with a merchant order id (at most
	// one in practice), whatever their merchant.
	PaymentsByOrder(ctx context.Context, orderID string) ([]payments.Payment, error)
	// RefundsByOrder reads the refunds with a refund order id.
	RefundsByOrder(ctx context.Context, refundOrderID string) ([]payments.Refund, error)
	// Resolve applies decide to the payment under its row lock, rewrites the
	// answer of the key that reported its outcome, and writes an audit row,
	// in one transaction (see AdminStore.Resolve).
	Resolve(ctx context.Context, id string, decide func(before payments.Payment, dbNow time.Time) (payments.PaymentChange, error), res payments.Resolution) (payments.Payment, error)
	// ResolveRefund is Resolve for a refund (see AdminStore.ResolveRefund).
	ResolveRefund(ctx context.Context, id string, decide func(before payments.Refund, dbNow time.Time) (payments.RefundChange, error), res payments.Resolution) (payments.Refund, error)
	// HastenKey makes the reconciler's next look at an unfinished key due
	// now, leaving its lease alone; false when the key is not in progress.
	HastenKey(ctx context.Context, ref idemkeys.Ref) (bool, error)
	// HastenLook makes the next look at a payment in requires_review or
	// requires_action due now; of a payment still processing, due as soon
	// as its worker leaves it in requires_action.
	HastenLook(ctx context.Context, p payments.Payment) error
	// HastenRefundCheck makes the refund queue's next look at a refund
	// pending at its PSP or in review due now.
	HastenRefundCheck(ctx context.Context, r payments.Refund) error
}

// Source is a PSP the gateway takes notifications from: its reader,
// and the name its payments record (PSPName), which a notification's
// payments must carry.
type Source struct {
	PSP    string
	Reader psp.NoticeReader
}

// Config tunes the receiving of notifications.
type Config struct {
	// PSPTimeout bounds the adapter's reading (a fetch from the PSP).
	PSPTimeout time.Duration
	// Logger receives what each notification did; nil discards.
	Logger *slog.Logger
	// Hasher names keys and merchants in logs.
	Hasher *idemkeys.Hasher
	// Observer counts the contradictions; nil counts nothing.
	Observer Observer
}

// Observer is told when a PSP contradicts the gateway's record.
type Observer interface {
	// Contradicted counts a PSP's report that contradicts a settled subject
	// of the kind; review says it was sent to requires_review (false: the
	// report changed nothing, as when it says money did not move).
	Contradicted(kind payments.Kind, review bool)
}

type noObserver struct{}

func (noObserver) Contradicted(payments.Kind, bool) {}

// Notices settles payments and refunds from their PSPs' notifications.
type Notices struct {
	store   Store
	sources map[string]Source
	cfg     Config
	log     *slog.Logger
	hash    *idemkeys.Hasher
}

// New takes notifications from sources, by the name of the route
// they arrive on ("stripe", "toss").
func New(store Store, sources map[string]Source, cfg Config) *Notices {
	if cfg.PSPTimeout <= 0 {
		cfg.PSPTimeout = payments.DefaultPSPTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Hasher == nil {
		cfg.Hasher = idemkeys.NewHasher(nil)
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	return &Notices{store: store, sources: sources, cfg: cfg, log: cfg.Logger, hash: cfg.Hasher}
}

// noticeActor signs the decisions taken on a PSP's notification.
const noticeActor = "psp notification"

// Receive reads one notification from source and settles what it names.
// A nil error acknowledges it: the PSP need not send it again (nothing to
// do, an unknown order, a payment of another PSP included). Errors are
// *errs.Error: errs.CodeNotFound (no such source configured), errs.CodeNoticeRejected (it
// does not verify or cannot be read: sending it again will not help),
// errs.CodeUnavailable (the PSP or the database could not be reached: the PSP
// should send it again).
func (n *Notices) Receive(ctx context.Context, source string, header http.Header, body []byte) error {
	src, ok := n.sources[source]
	if !ok {
		return &errs.Error{Code: errs.CodeNotFound, Message: "notifications from " + source + " are not configured here"}
	}
	rctx, cancel := context.WithTimeout(ctx, n.cfg.PSPTimeout)
	notice, err := src.Reader.ReadNotice(rctx, header, body)
	cancel()
	switch {
	case errors.Is(err, psp.ErrUnverified):
		n.log.WarnContext(ctx, "PSP notification refused", "source", source, "err", err)
		return &errs.Error{Code: errs.CodeNoticeRejected, Message: "the notification could not be verified", Err: err}
	case err != nil:
		n.log.WarnContext(ctx, "PSP notification could not be read from the PSP", "source", source, "err", err)
		return &errs.Error{Code: errs.CodeUnavailable, RetryAfter: time.Minute, Err: err,
			Message: "the payment provider could not be asked about this notification; send it again later"}
	}
	n.log.InfoContext(ctx, "PSP notification", "source", source, "event_id", notice.ID, "event_type", notice.Type,
		"charges", len(notice.Charges), "refunds", len(notice.Refunds))
	for _, why := range notice.Skipped {
		n.log.InfoContext(ctx, "PSP notification: nothing of the gateway's", "source", source, "event_id", notice.ID, "detail", why)
	}
	var failures []error
	for _, c := range notice.Charges {
		failures = append(failures, n.charge(ctx, src, notice, c))
	}
	for _, x := range notice.Refunds {
		failures = append(failures, n.refund(ctx, src, notice, x))
	}
	if err := errors.Join(failures...); err != nil {
		return errs.Internal(err)
	}
	return nil
}

// charge settles, or hastens the settling of, the payment c is the charge of.
func (n *Notices) charge(ctx context.Context, src Source, notice psp.Notice, c psp.Charge) error {
	ps, err := n.store.PaymentsByOrder(ctx, c.MerchantOrderID)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		n.log.InfoContext(ctx, "PSP notification for an unknown order", "psp", src.PSP, "event_id", notice.ID, "order_id", c.MerchantOrderID)
		return nil
	}
	var failures []error
	for _, p := range ps {
		failures = append(failures, n.payment(ctx, src, notice, p, c))
	}
	return errors.Join(failures...)
}

func (n *Notices) payment(ctx context.Context, src Source, notice psp.Notice, p payments.Payment, c psp.Charge) error {
	ref := payments.OutcomeKey(p)
	attrs := []any{n.hash.Attr(ref), "payment_id", p.ID, "psp", src.PSP, "event_id", notice.ID, "status", string(p.Status), "psp_status", string(c.Status)}
	if p.PSP != src.PSP {
		// Its lookups go to the PSP it records; another PSP's word on its
		// order id says nothing about it.
		n.log.WarnContext(ctx, "PSP notification for a payment another PSP holds: ignored", append(attrs, "payment_psp", p.PSP)...)
		return nil
	}
	if p.Operation != nil {
		// A capture or a void is in flight: its worker, or the reconciler,
		// settles it from the charge it reads; hasten that look.
		hastened, err := n.store.HastenKey(ctx, p.Operation.Ref(p.MerchantID))
		if err == nil {
			n.log.InfoContext(ctx, "PSP notification: the payment's "+string(p.Operation.Kind)+" is looked at now", append(attrs, "in_progress", hastened)...)
		}
		return err
	}
	switch p.Status {
	case payments.RequiresAction, payments.RequiresCapture:
		return n.settleAction(ctx, notice, p, c, attrs)
	case payments.Processing:
		// A worker holds its key, or the reconciler will: hasten the look,
		// and the look at the payment should the worker leave it waiting
		// for its customer.
		hastened, err := n.store.HastenKey(ctx, ref)
		if err == nil {
			err = n.store.HastenLook(ctx, p)
		}
		if err == nil {
			n.log.InfoContext(ctx, "PSP notification: the payment's key is looked at now", append(attrs, "in_progress", hastened)...)
		}
		return err
	case payments.RequiresReview:
		// The review queue settles it on its proof; it looks now.
		if err := n.store.HastenLook(ctx, p); err != nil {
			return err
		}
		n.log.InfoContext(ctx, "PSP notification: the payment in review is looked at now", attrs...)
		return nil
	case payments.RequiresConfirmation:
		// Nothing was confirmed through the gateway; a charge can only come
		// from a confirm, which will find it.
		n.log.InfoContext(ctx, "PSP notification for a payment not confirmed yet: nothing to do", attrs...)
		return nil
	}
	settled, err := payments.ApplyCharge(p, c)
	switch {
	case errors.Is(err, payments.ErrChargePending), err == nil && settled.Status == p.Status:
		n.log.InfoContext(ctx, "PSP notification: the payment is settled already", attrs...)
		return nil
	case err == nil && (settled.Status == payments.Succeeded || settled.Status == payments.RequiresReview):
		// The PSP holds a charge the gateway answered did not happen (or
		// another charge under its order id): the answer is in doubt.
		return n.contradicted(ctx, notice, p, c, settled, attrs)
	}
	// The PSP says money did not move for a payment that took it: no
	// money moves back for a late or confused report.
	n.cfg.Observer.Contradicted(payments.KindPayment, false)
	n.log.ErrorContext(ctx, "PSP notification contradicts a settled payment; nothing changed", attrs...)
	return nil
}

// contradicted sends a settled payment the PSP's report contradicts to
// requires_review, with the PSP's evidence, unless it moved meanwhile.
func (n *Notices) contradicted(ctx context.Context, notice psp.Notice, p payments.Payment, c psp.Charge, settled payments.Payment, attrs []any) error {
	why := fmt.Sprintf("the PSP reports charge %s %s (%d %s) for a payment recorded %s (notification %s %s)",
		c.Reference, c.Status, c.Amount, c.Currency, p.Status, notice.Type, notice.ID)
	if settled.Status == payments.RequiresReview {
		why += ": " + settled.ReviewReason
	}
	_, err := n.store.Resolve(ctx, p.ID, payments.ChangePayment(func(now payments.Payment) (payments.Payment, error) {
		if now.Status != p.Status {
			return now, idemkeys.ErrFenced
		}
		now.Status, now.ReviewReason = payments.RequiresReview, truncateReason(why)
		if now.PSPReference == "" {
			now.PSPReference = c.Reference
		}
		return now, nil
	}), payments.Resolution{PaymentID: p.ID, To: payments.RequiresReview, PSPReference: c.Reference, Reason: truncateReason(why), Actor: noticeActor})
	switch {
	case errors.Is(err, idemkeys.ErrFenced):
		n.log.InfoContext(ctx, "PSP notification: the payment was settled meanwhile", attrs...)
		return nil
	case err != nil:
		return err
	}
	n.cfg.Observer.Contradicted(payments.KindPayment, true)
	n.log.ErrorContext(ctx, "PSP notification contradicts a settled payment: sent to requires_review", append(attrs, "reason", why)...)
	return nil
}

// settleAction settles a payment that waited for its customer, or an
// authorization the PSP captured or let lapse on its own, with a
// compare-and-set on its status (and on no operation being in flight), as
// the reconciler's look would.
func (n *Notices) settleAction(ctx context.Context, notice psp.Notice, p payments.Payment, c psp.Charge, attrs []any) error {
	settled, err := payments.ApplyCharge(p, c)
	switch {
	case errors.Is(err, payments.ErrChargePending):
		n.log.InfoContext(ctx, "PSP notification: the payment still waits for its customer", attrs...)
		return nil
	case err != nil:
		n.log.WarnContext(ctx, "PSP notification: the charge cannot be read", append(attrs, "err", err)...)
		return nil
	}
	why := fmt.Sprintf("PSP notification %s %s: charge %s %s", notice.Type, notice.ID, c.Reference, c.Status)
	if settled.Status == payments.RequiresReview {
		why += ": " + settled.ReviewReason
	}
	if settled.Status == p.Status {
		n.log.InfoContext(ctx, "PSP notification: the payment is as the PSP holds it", attrs...)
		return nil
	}
	_, err = n.store.Resolve(ctx, p.ID, payments.ChangePayment(func(now payments.Payment) (payments.Payment, error) {
		if now.Status != p.Status || now.Operation != nil {
			return now, idemkeys.ErrFenced
		}
		return settled, nil
	}), payments.Resolution{PaymentID: p.ID, To: settled.Status, PSPReference: settled.PSPReference, Reason: truncateReason(why), Actor: noticeActor})
	switch {
	case errors.Is(err, idemkeys.ErrFenced):
		n.log.InfoContext(ctx, "PSP notification: the payment was settled meanwhile", attrs...)
		return nil
	case err != nil:
		return err
	}
	level := slog.LevelInfo
	if settled.Status == payments.RequiresReview {
		level = slog.LevelWarn
	}
	n.log.Log(ctx, level, "payment settled by its PSP's notification", append(attrs, "to", string(settled.Status))...)
	return nil
}

// refund settles, or hastens the settling of, the refund x is the PSP's record of.
func (n *Notices) refund(ctx context.Context, src Source, notice psp.Notice, x psp.Refund) error {
	rs, err := n.store.RefundsByOrder(ctx, x.RefundOrderID)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		n.log.InfoContext(ctx, "PSP notification for an unknown refund", "psp", src.PSP, "event_id", notice.ID, "refund_order_id", x.RefundOrderID)
		return nil
	}
	var failures []error
	for _, r := range rs {
		failures = append(failures, n.refundOf(ctx, src, notice, r, x))
	}
	return errors.Join(failures...)
}

func (n *Notices) refundOf(ctx context.Context, src Source, notice psp.Notice, r payments.Refund, x psp.Refund) error {
	ref := idemkeys.Ref{MerchantID: r.MerchantID, Endpoint: payments.EndpointCreateRefund, Key: r.IdempotencyKey}
	attrs := []any{n.hash.Attr(ref), "refund_id", r.ID, "payment_id", r.PaymentID, "psp", src.PSP, "event_id", notice.ID,
		"status", string(r.Status), "psp_status", string(x.Status)}
	if r.PSP != src.PSP {
		n.log.WarnContext(ctx, "PSP notification for a refund another PSP holds: ignored", append(attrs, "refund_psp", r.PSP)...)
		return nil
	}
	switch {
	case r.Status == payments.RefundPending && r.Review.After.IsZero():
		// Its key is in progress: a worker or the reconciler settles it.
		_, err := n.store.HastenKey(ctx, ref)
		return err
	case r.Status == payments.RefundRequiresReview:
		return n.store.HastenRefundCheck(ctx, r)
	case r.Status != payments.RefundPending:
		settled, err := payments.ApplyRefund(r, x)
		switch {
		case err != nil, settled.Status == r.Status, settled.Status == payments.RefundPending:
			return nil
		case r.Status == payments.RefundFailed && (settled.Status == payments.RefundSucceeded || settled.Status == payments.RefundRequiresReview),
			settled.Status == payments.RefundRequiresReview:
			// Money went back that the gateway answered did not (or the PSP
			// holds another refund under its order id).
			return n.refundContradicted(ctx, notice, r, x, settled, attrs)
		}
		n.cfg.Observer.Contradicted(payments.KindRefund, false)
		n.log.ErrorContext(ctx, "PSP notification contradicts a settled refund; nothing changed", attrs...)
		return nil
	}
	// Pending at the PSP, its key completed: the refund queue's settle.
	settled, err := payments.ApplyRefund(r, x)
	switch {
	case err != nil:
		n.log.WarnContext(ctx, "PSP notification: the refund cannot be read", append(attrs, "err", err)...)
		return nil
	case settled.Status == payments.RefundPending:
		return nil
	}
	why := fmt.Sprintf("PSP notification %s %s: refund %s %s", notice.Type, notice.ID, x.Reference, x.Status)
	_, err = n.store.ResolveRefund(ctx, r.ID, payments.ChangeRefund(func(now payments.Refund) (payments.Refund, error) {
		if now.Status != payments.RefundPending {
			return now, idemkeys.ErrFenced
		}
		return settled, nil
	}), payments.Resolution{PaymentID: r.ID, To: payments.Status(settled.Status), PSPReference: settled.PSPReference, Reason: truncateReason(why), Actor: noticeActor})
	switch {
	case errors.Is(err, idemkeys.ErrFenced):
		return nil
	case err != nil:
		return err
	}
	n.log.InfoContext(ctx, "refund settled by its PSP's notification", append(attrs, "to", string(settled.Status))...)
	return nil
}

// refundContradicted sends a settled refund the PSP's report contradicts to
// requires_review (its amount reserved on its payment again), with the
// PSP's evidence, unless it moved meanwhile. When its payment can no longer
// hold the reservation (other refunds took it since), nothing changes: the
// contradiction is logged and counted for a person.
func (n *Notices) refundContradicted(ctx context.Context, notice psp.Notice, r payments.Refund, x psp.Refund, settled payments.Refund, attrs []any) error {
	why := fmt.Sprintf("the PSP reports refund %s %s (%d %s) for a refund recorded %s (notification %s %s)",
		x.Reference, x.Status, x.Amount, x.Currency, r.Status, notice.Type, notice.ID)
	if settled.Status == payments.RefundRequiresReview {
		why += ": " + settled.ReviewReason
	}
	_, err := n.store.ResolveRefund(ctx, r.ID, payments.ChangeRefund(func(now payments.Refund) (payments.Refund, error) {
		if now.Status != r.Status {
			return now, idemkeys.ErrFenced
		}
		now.Status, now.ReviewReason = payments.RefundRequiresReview, truncateReason(why)
		if now.PSPReference == "" {
			now.PSPReference = x.Reference
		}
		return now, nil
	}), payments.Resolution{PaymentID: r.ID, To: payments.Status(payments.RefundRequiresReview), PSPReference: x.Reference, Reason: truncateReason(why), Actor: noticeActor})
	switch {
	case errors.Is(err, idemkeys.ErrFenced):
		return nil
	case errors.Is(err, payments.ErrExceedsPayment):
		n.cfg.Observer.Contradicted(payments.KindRefund, false)
		n.log.ErrorContext(ctx, "PSP notification contradicts a settled refund, whose payment can no longer hold it: nothing changed, a person must look",
			append(attrs, "reason", why)...)
		return nil
	case err != nil:
		return err
	}
	n.cfg.Observer.Contradicted(payments.KindRefund, true)
	n.log.ErrorContext(ctx, "PSP notification contradicts a settled refund: sent to requires_review", append(attrs, "reason", why)...)
	return nil
}

// truncateReason keeps an audit reason within its column.
func truncateReason(s string) string {
	if len(s) > 1000 {
		return s[:1000]
	}
	return s
}
