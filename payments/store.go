package payments

import (
	"context"
	"errors"
	"time"

	"gateway/idemkeys"
	"gateway/psp"
)

// FlowStore is what the flow reads and writes. Each method runs its own
// short transaction and holds no connection once it returns, so no
// transaction ever spans a call to the PSP. What it writes was decided by
// the domain (PaymentChange, RefundChange); it renders nothing itself.
type FlowStore interface {
	// Now reads the database's clock: what a claim stamps its subject with.
	Now(ctx context.Context) (time.Time, error)

	// Claim inserts the key's record and the payment with its created
	// event, together or neither. Without c.Answer the key is in progress
	// (c.Token, a lease of c.Lease from the payment's CreatedAt that is also
	// the window to send the charge in); with it, the key is completed at
	// once with that answer and nothing may be sent for it.
	// Errors: idemkeys.ErrExists when the key is already claimed (read it to
	// learn what to do); *errs.Error CodeKeyReused when the key's record was
	// purged but its payment exists; errs.ErrWriteUnknown when the commit's
	// fate is unknown (re-read the key, never re-insert blindly).
	Claim(ctx context.Context, c Claim) error

	// Record reads a key's record alone (one primary-key read) with the
	// database's clock; idemkeys.ErrNotFound when absent.
	Record(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, error)

	// TakeOver moves an expired lease (by the database's clock) from token
	// seen to a new token, returned, with a lease of `lease` from now.
	// idemkeys.ErrFenced when the lease is alive, the key completed, or
	// another worker won.
	TakeOver(ctx context.Context, ref idemkeys.Ref, seen idemkeys.Token, lease time.Duration) (idemkeys.Token, error)

	// ArmSend records, while the caller holds token, that one more send (a
	// charge, a refund) may leave within `window` from now: it raises
	// may_send_until and the lease to cover it and counts the attempt. Call
	// it before any send but the claim's own (whose lease already says so).
	// idemkeys.ErrFenced when the caller no longer holds the lease.
	// g is judged on the database's clock in the same statement; when it
	// refuses, or the key's cancellation by key was requested (nothing of
	// it is sent again), ErrArmRefused and nothing was written.
	ArmSend(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, window time.Duration, g ArmGuard) error

	// Settle completes the key with c.Answer, moves the payment out of
	// processing to c.Payment's state (final, requires_action or
	// requires_review) and writes c.Event, only while the caller holds
	// token. idemkeys.ErrFenced: nothing was written. errs.ErrWriteUnknown:
	// the write's fate is unknown; re-read.
	Settle(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c PaymentChange) error

	// Failover ends p's attempt before its current one (the last of
	// p.Attempts, certainly not processed) and starts the current one (p's
	// PSP, MerchantOrderID and Attempt) under the lease's next token,
	// arming one send of it within window from now: fenced on token and on
	// the ended attempt's send being the only one of its order id ever
	// authorised, and refused while a cancellation by key is requested
	// (ErrArmRefused; nothing written). The new token fences out every
	// worker that read the key before: a takeover compares the token it
	// read, and must not resume the ended attempt. It returns the
	// database's time of the change. idemkeys.ErrFenced: the caller lost
	// the lease. errs.ErrWriteUnknown: re-read.
	Failover(ctx context.Context, ref idemkeys.Ref, token, next idemkeys.Token, p Payment, window time.Duration) (time.Time, error)

	// ClaimConfirm inserts a confirm's key (IN_PROGRESS, c.Token, a lease
	// that is also the window to send the charge in; its subject the
	// payment), then, under the payment's row lock, lets decide (given the
	// database's clock) turn the payment into the one to charge, and writes
	// the change (the payment in processing with the key's name, its
	// event), all or nothing. It returns the payment as now stored. Errors:
	// idemkeys.ErrExists (the key is claimed: read it); errs.ErrNotFound (no
	// such payment for the merchant); decide's own error (nothing stored,
	// the key stays free); errs.ErrWriteUnknown (re-read the key).
	ClaimConfirm(ctx context.Context, c ConfirmClaim, decide func(p Payment, dbNow time.Time) (PaymentChange, error)) (Payment, error)

	// ClaimOperation is ClaimConfirm for a capture or a void: the key (its
	// subject the payment), then decide under the payment's row lock, then
	// the change: the operation in flight on the payment, or, when the
	// change carries an Answer, the payment's new state, its event and the
	// key completed with the answer. It returns the payment as now stored.
	ClaimOperation(ctx context.Context, c OperationClaim, decide func(p Payment, dbNow time.Time) (PaymentChange, error)) (Payment, error)

	// SettleOperation completes the key with c.Answer and writes the
	// payment as its operation left it (the operation no longer in flight)
	// and c.Event, only while the caller holds token and the payment's
	// operation in flight is the key's. idemkeys.ErrFenced: nothing was
	// written. errs.ErrWriteUnknown: the write's fate is unknown; re-read.
	SettleOperation(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c PaymentChange) error

	// ClaimCancellation inserts a cancellation's own key, locks the
	// canceled key's record (or its absence) and its payment, lets decide
	// (given the database's clock) say what to write, and writes it: the
	// cancellation's row (ErrCanceledAlready when the key has one), a
	// tombstone for a key nothing claimed, the payment canceled (with its
	// key's expired lease taken and the key completed, for FenceKey), and
	// the own key completed with the decision's answer, all or nothing.
	ClaimCancellation(ctx context.Context, c CancelClaim, decide func(CancelTarget, time.Time) (CancelDecision, error)) (KeyCancellation, idemkeys.Response, error)
	// FinishCancellation records a requested cancellation as kc says and
	// gives its own key answer from then on; idemkeys.ErrFenced when it is
	// no longer requested.
	FinishCancellation(ctx context.Context, kc KeyCancellation, answer idemkeys.Response) error

	// Release ends the caller's lease now without storing a response, so a
	// retry can resume at once; notSent counts the caller's send as one that
	// certainly did nothing. idemkeys.ErrFenced when the caller no longer
	// holds it.
	Release(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, notSent bool) error

	// ClaimRefund inserts a refund's key (IN_PROGRESS, c.Token, a lease that
	// is also the window to send the refund in), then, under the payment's
	// row lock, lets decide (given the database's clock) turn the payment
	// into the refund to create, and writes the change (the refund, its
	// reservation on the payment, its event), all or nothing. It returns the
	// refund as inserted and the payment as locked and reserved. Errors:
	// idemkeys.ErrExists (the key is claimed: read it); errs.ErrNotFound (no
	// such payment for the merchant); decide's own error (nothing stored);
	// *errs.Error CodeKeyReused (the key's record was purged but its refund
	// exists); errs.ErrWriteUnknown (re-read the key).
	ClaimRefund(ctx context.Context, c RefundClaim, decide func(p Payment, dbNow time.Time) (RefundChange, error)) (Refund, Payment, error)
	// Refund reads one of the merchant's refunds; errs.ErrNotFound otherwise.
	Refund(ctx context.Context, merchantID, id string) (Refund, error)
	// SettleRefund completes the key with c.Answer and moves the refund out
	// of pending to c.Refund's state (succeeded, failed, pending at the PSP,
	// or requires_review), with its payment's amounts and its event, only
	// while the caller holds token. idemkeys.ErrFenced: nothing was
	// written. errs.ErrWriteUnknown: re-read.
	SettleRefund(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c RefundChange) error

	// Payment reads one of the merchant's payments; errs.ErrNotFound otherwise.
	Payment(ctx context.Context, merchantID, id string) (Payment, error)
	// PaymentByKey finds the payment a key created; errs.ErrNotFound otherwise.
	PaymentByKey(ctx context.Context, merchantID, key string) (Payment, error)
}

// ArmGuard is when a resumed worker may still send again, judged on the
// database's clock as its send is armed (a lookup earlier said "not found").
type ArmGuard struct {
	// Forever: the PSP deduplicates the order id for ever.
	Forever bool
	// DedupeAge: arm while the key is younger than this: the PSP's dedupe
	// memory less the time the new send may take to leave and to land
	// (PSP timeout plus creation window). Zero: no such memory to lean on.
	DedupeAge time.Duration
	// Authoritative and LateAfter: or, when the PSP's "not found" is
	// authoritative, once may_send_until is LateAfter (its creation
	// window) in the past: no earlier send can still appear.
	Authoritative bool
	LateAfter     time.Duration
}

// ArmGuardFor is the guard of a resumed send to a PSP with caps.
func ArmGuardFor(caps psp.Capabilities, pspTimeout time.Duration) ArmGuard {
	g := ArmGuard{Authoritative: caps.AuthoritativeLookup, LateAfter: caps.CreationWindow}
	if caps.DedupesOrderID {
		if caps.DedupeWindow == 0 {
			g.Forever = true
		} else if age := caps.DedupeWindow - pspTimeout - caps.CreationWindow; age > 0 {
			g.DedupeAge = age
		}
	}
	return g
}

// ErrArmRefused: ArmSend's guard said no more send may leave (the PSP's
// dedupe memory may end before it would land, or the key's cancellation
// was requested); nothing was written.
var ErrArmRefused = errors.New("payments: sending again could outlive the PSP's dedupe memory")

// Claim is what a fresh request writes: its key's record, its payment and
// the payment's first event.
type Claim struct {
	Ref         idemkeys.Ref
	Fingerprint [32]byte
	Token       idemkeys.Token
	// Lease is how long the claimant owns the key and may send its charge.
	Lease   time.Duration
	Payment Payment
	Event   Event
	// Answer, when set, completes the key at once: a payment to confirm
	// later, for which nothing is sent.
	Answer *idemkeys.Response
}

// NewClaim is the claim of ref for p at the database's time now: p stamped
// with it, and its first event.
func NewClaim(ref idemkeys.Ref, fp [32]byte, token idemkeys.Token, lease time.Duration, p Payment, now time.Time) Claim {
	p.CreatedAt, p.UpdatedAt = now, now
	return Claim{Ref: ref, Fingerprint: fp, Token: token, Lease: lease, Payment: p, Event: PaymentEvent(p)}
}

// ConfirmClaim is what a confirm request writes: its key's record, naming
// the payment it charges, whose status it moves to processing.
type ConfirmClaim struct {
	Ref         idemkeys.Ref
	Fingerprint [32]byte
	Token       idemkeys.Token
	// Lease is how long the claimant owns the key and may send the charge.
	Lease     time.Duration
	PaymentID string
}

// Reschedule is how the reconciler gives back a key it could not settle.
type Reschedule struct {
	// After and NotBefore: look again no sooner than After from now (by the
	// database's clock) and no sooner than NotBefore (a database time; zero
	// for none).
	After     time.Duration
	NotBefore time.Time
	// Attempts is the new count of passes that learned nothing.
	Attempts int
	// NotFound records, if none is yet, that the PSP has just said
	// authoritatively that it has no charge (the first of the two answers a
	// "failed" needs).
	NotFound bool
}

// Pending is an unfinished key with what it created, as the reconciler
// claims it: Key carries the reconciler's new token and the database's
// clock at the claim. Payment is the key's payment, or the payment of its
// refund when Refund is set.
type Pending struct {
	Key     idemkeys.Record
	Payment Payment
	Refund  *Refund
}

// RefundCheck is a refund pending at its PSP or in review that the refund
// queue looks at now, with its payment; Refund.Review.After is the look's
// mark, the fence of its writes.
type RefundCheck struct {
	Refund  Refund
	Payment Payment
	// DBNow is the database's clock at the claim.
	DBNow time.Time
	// Unreadable, when set, says why the refund's row or its payment's
	// cannot be read: the refund holds only its ids, is set aside for a
	// day and counted as quarantined, and the queue goes on without it.
	Unreadable string
}

// Quarantined is an unfinished key the reconciler could not read (its
// payment missing or undecodable): set aside with the reason, counted,
// never settled by itself.
type Quarantined struct {
	Key    idemkeys.Record
	Reason string
}

// Claimed is what one reconciler claim took.
type Claimed struct {
	Pending     []Pending
	Quarantined []Quarantined
}

// InReview is a payment in requires_review that the review queue looks at
// now; Payment.Review.After is the look's mark, the fence of its writes.
type InReview struct {
	Payment Payment
	// DBNow is the database's clock at the claim.
	DBNow time.Time
}

// Backlog is what is left for the reconciler and for people, on the
// database's clock.
type Backlog struct {
	// OldestUnfinished is the age of the oldest key in progress (0: none).
	OldestUnfinished time.Duration
	// Quarantined counts unfinished keys set aside as unreadable.
	Quarantined int
	// NeedsReview counts payments in requires_review; OldestReview is how
	// long the oldest has waited.
	NeedsReview  int
	OldestReview time.Duration
	// RefundsNeedReview and OldestRefundReview are the same of refunds.
	RefundsNeedReview  int
	OldestRefundReview time.Duration
}

// PurgeCursor is where a purge of expired keys stands: the last key it
// looked at, in the order it walks them (completion time, then primary
// key). The zero cursor is the start.
type PurgeCursor struct {
	CompletedAt time.Time
	Ref         idemkeys.Ref
}

// EventPurgeCursor is where a purge of expired events stands: the last
// event it looked at, in the order it walks them (creation time, then the
// store's position). The zero cursor is the start.
type EventPurgeCursor struct {
	CreatedAt time.Time
	Pos       int64
}
