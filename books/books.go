// Package books compares the gateway's records with a PSP's own ledger for
// a period and makes the record whole (design §17): a charge the PSP made
// that the gateway has no row for becomes a payment in review, so that a
// lost write is never a lost charge; a record the PSP contradicts goes to
// review with both sides kept. A run is one per account and period, claimed
// as the reconciler claims its rows, resumable, and a rerun acts on nothing
// twice.
package books

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

// Class is the kind of a discrepancy.
type Class string

const (
	// OrphanCharge: the PSP holds a charge (succeeded, authorized or
	// pending) the gateway has no record of.
	OrphanCharge Class = "orphan_charge"
	// OrphanRefund: the PSP made a refund the gateway has no record of (one
	// made in the PSP's dashboard, say).
	OrphanRefund Class = "orphan_refund"
	// MissingAtPSP: the gateway says a charge or refund moved money and the
	// PSP has no record of it.
	MissingAtPSP Class = "missing_at_psp"
	// Mismatch: both have it, with another amount, currency or status.
	Mismatch Class = "mismatch"
)

// Classes are every class, in the order reports list them.
var Classes = []Class{OrphanCharge, OrphanRefund, MissingAtPSP, Mismatch}

// Action is what the gateway did about a discrepancy.
type Action string

const (
	// ActionRecordedPayment: a payment in review now holds the PSP's charge.
	ActionRecordedPayment Action = "recorded_payment"
	// ActionRecordedRefund: a refund in review now holds the PSP's refund;
	// its payment's refunded amount moves when an operator resolves it.
	ActionRecordedRefund Action = "recorded_refund"
	// ActionReview: the gateway's payment or refund went to review.
	ActionReview Action = "review"
	// ActionAlertOnly: nothing the gateway can write holds it (an orphan
	// charge whose merchant nobody can tell, a refund of a charge the
	// gateway does not know): the discrepancy and its alert are the record.
	ActionAlertOnly Action = "alert_only"
)

// Discrepancy is one thing the PSP's ledger and the gateway disagree on,
// with the evidence of both.
type Discrepancy struct {
	ID      int64
	RunID   int64
	Account string
	Class   Class
	// Subject is what it is about: the order id, the refund order id, or
	// the PSP's reference of a refund without one. (Account, Class,
	// Subject) is recorded once.
	Subject    string
	Action     Action
	MerchantID string
	PaymentID  string
	RefundID   string
	Detail     string
	// PSPRecord is the PSP's line; nil when the PSP has none.
	PSPRecord *psp.Transaction
	// GatewayRecord is the gateway's record as the API renders it; nil
	// when the gateway has none.
	GatewayRecord json.RawMessage
	CreatedAt     time.Time
	ResolvedAt    time.Time
}

// Run statuses.
const (
	RunRunning    = "running"
	RunIncomplete = "incomplete"
	RunComplete   = "complete"
)

// Run phases: the ledger's lines are checked first, then the gateway's
// records of the period.
const (
	PhaseLedger  = "ledger"
	PhaseGateway = "gateway"
	PhaseDone    = "done"
)

// Counts are what a pass saw.
type Counts struct {
	// Lines are the ledger's lines in the period.
	Lines int64 `json:"lines"`
	// Matched lines agree with the gateway's records.
	Matched int64 `json:"matched"`
	// Unsettled lines are of records the gateway has not settled yet (the
	// reconciler or review owns them).
	Unsettled int64 `json:"unsettled"`
	// NoMoney lines moved no money (declined, voided) and have no record.
	NoMoney int64 `json:"no_money"`
	// Outside are lines of the overlap past the period, read only to find
	// the gateway's records.
	Outside int64 `json:"outside"`
	// Checked are the gateway's records of the period that were checked.
	Checked int64 `json:"checked"`
}

// Run is one reconciliation of an account's period [From, To), in UTC.
type Run struct {
	ID      int64
	Account string
	From    time.Time
	To      time.Time
	Status  string
	Passes  int
	// Token fences the run's writes: a pass that lost its lease to another
	// writes nothing more.
	Token  int64
	Cursor string
	Phase  string
	Counts Counts
	// LastError is why the last pass stopped short.
	LastError   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt time.Time
}

// Errors of a claim.
var (
	// ErrRunHeld: another pass holds the period's run.
	ErrRunHeld = errors.New("books: another pass is running this period")
	// ErrRunComplete: the period's run is complete (pass Again to rerun it).
	ErrRunComplete = errors.New("books: the period's run is complete")
	// ErrLost: the pass's lease was taken over; it wrote nothing more.
	ErrLost = errors.New("books: the run's lease was taken over")
	// ErrKnown: the discrepancy was recorded before; nothing was done.
	ErrKnown = errors.New("books: the discrepancy is recorded already")
	// ErrNoLedger: the account's adapter cannot list its PSP's ledger.
	ErrNoLedger = errors.New("books: the account's adapter cannot list its PSP's transactions")
)

// LostKey is a key on the payments endpoint whose payment row is gone.
type LostKey struct {
	Ref       idemkeys.Ref
	PaymentID string
}

// Store is what the books job reads and writes.
type Store interface {
	// ClaimRun claims the run of (account, from, to) for lease on the
	// database's clock: a new run, an incomplete one or one whose lease
	// passed, or with again a complete one (a rerun: one more pass). It
	// fails ErrRunHeld or ErrRunComplete.
	ClaimRun(ctx context.Context, account string, from, to time.Time, lease time.Duration, again bool) (Run, error)
	// SaveRun stores r's cursor, phase, counts, status and last error and
	// extends its lease, fenced on r.Token (ErrLost).
	SaveRun(ctx context.Context, r Run, lease time.Duration) error
	// PaymentsByOrder are the payments with these order ids, and the
	// attempts of failed-over payments with them (at account).
	PaymentsByOrder(ctx context.Context, account string, orderIDs []string) ([]payments.Payment, []Attempt, error)
	// RefundsByOrder are the refunds with these refund order ids or PSP
	// references.
	RefundsByOrder(ctx context.Context, refundOrderIDs, references []string) ([]payments.Refund, error)
	// Known are the recorded discrepancies of account about these subjects.
	Known(ctx context.Context, account string, subjects []string) ([]Discrepancy, error)
	// Settled lists up to limit payments sent to account, created in
	// [from, to), that say money moved (succeeded, requires_capture),
	// after the position after, in the order of Position.
	Settled(ctx context.Context, account string, from, to time.Time, after Position, limit int) ([]payments.Payment, error)
	// SettledRefunds is Settled for succeeded refunds.
	SettledRefunds(ctx context.Context, account string, from, to time.Time, after Position, limit int) ([]SettledRefund, error)
	// LostKeys are the keys on the payments endpoint, created in
	// [from, to), whose payment is gone.
	LostKeys(ctx context.Context, from, to time.Time) ([]LostKey, error)
	// RecordPayment inserts p (its change's event with it) and d in one
	// transaction, fenced on run; ErrKnown when d is recorded already.
	RecordPayment(ctx context.Context, run Run, d Discrepancy, c payments.PaymentChange) error
	// RecordRefund inserts r, reserving its amount on its payment, with its
	// event and d, in one transaction; ErrKnown as RecordPayment, and
	// payments.ErrExceedsPayment when the payment cannot hold it.
	RecordRefund(ctx context.Context, run Run, d Discrepancy, c payments.RefundChange) error
	// Review puts the payment d names in review (no review queue looks at
	// it: only an operator resolves it) with its event and d, in one
	// transaction; a refund when d names one.
	Review(ctx context.Context, run Run, d Discrepancy, reason string) error
	// Record stores d alone.
	Record(ctx context.Context, run Run, d Discrepancy) error
	// RunDiscrepancies are the discrepancies recorded by run, oldest first.
	RunDiscrepancies(ctx context.Context, runID int64) ([]Discrepancy, error)
	// Standing is what the books say now.
	Standing(ctx context.Context) (Standing, error)
	// ResolveDiscrepancy records an operator's acknowledgement of the
	// discrepancy id; errs.ErrNotFound for an unknown id. One resolved
	// already stays as it was.
	ResolveDiscrepancy(ctx context.Context, id int64, resolution string) error
}

// Attempt is an earlier attempt of a failed-over payment, by its order id.
type Attempt struct {
	MerchantID      string
	PaymentID       string
	MerchantOrderID string
	Outcome         string
	// Checked says its check is done (no check_after left).
	Checked bool
}

// Position is a place in a listing of the gateway's records, in the order
// of their index: creation time, then merchant and id.
type Position struct {
	CreatedAt  time.Time
	MerchantID string
	ID         string
}

// SettledRefund is a succeeded refund with its charge's PSP reference, which
// its lookup names.
type SettledRefund struct {
	payments.Refund
	ChargeReference string
}
