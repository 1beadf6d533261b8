package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake/fakeserver"
)

// The invariants of manual capture and cancel-by-key (design §15) are
// numbered from captureInvariantBase, after the consumers' 19.
const captureInvariantBase = 20

type dbCapturePayment struct {
	MerchantID         string         `db:"merchant_id"`
	ID                 string         `db:"id"`
	IdemKey            string         `db:"idem_key"`
	MerchantOrderID    string         `db:"merchant_order_id"`
	Status             string         `db:"status"`
	CaptureMethod      string         `db:"capture_method"`
	Amount             int64          `db:"amount"`
	Currency           string         `db:"currency"`
	AmountCaptured     int64          `db:"amount_captured"`
	AmountReserved     int64          `db:"amount_reserved"`
	AmountRefunded     int64          `db:"amount_refunded"`
	CancellationReason sql.NullString `db:"cancellation_reason"`
	OpKind             sql.NullString `db:"op_kind"`
	OpKey              sql.NullString `db:"op_key"`
}

func (p dbCapturePayment) manual() bool { return p.CaptureMethod == string(payments.CaptureManual) }

// captured is what the payment took, as payments.Payment.Captured says.
func (p dbCapturePayment) captured() int64 {
	switch {
	case p.Status != string(payments.Succeeded) && p.Status != string(payments.RequiresReview):
		return 0
	case p.manual():
		return p.AmountCaptured
	}
	return p.Amount
}

// dbCommandKey is an idempotency key of a capture, a void, a cancellation
// by key, or a POST /payments.
type dbCommandKey struct {
	MerchantID     string        `db:"merchant_id"`
	Endpoint       string        `db:"endpoint"`
	IdemKey        string        `db:"idem_key"`
	State          string        `db:"state"`
	SubjectID      string        `db:"subject_id"`
	Fingerprint    []byte        `db:"fingerprint"`
	ResponseStatus sql.NullInt32 `db:"response_status"`
	ResponseBody   []byte        `db:"response_body"`
}

// canceledBeforeClaimed: the key holds a cancellation by key that came
// before anything claimed it (no payment, payments.CanceledByKey).
func (k dbCommandKey) canceledBeforeClaimed() bool {
	return k.State == "COMPLETED" && k.SubjectID == "" && bytes.Equal(k.Fingerprint, payments.CanceledByKey[:])
}

type dbCancellation struct {
	MerchantID string         `db:"merchant_id"`
	Key        string         `db:"idem_key"`
	CancelKey  string         `db:"cancel_key"`
	Status     string         `db:"status"`
	PaymentID  sql.NullString `db:"payment_id"`
	RefundID   sql.NullString `db:"refund_id"`
}

type dbPaymentEvent struct {
	MerchantID string `db:"merchant_id"`
	ObjectID   string `db:"object_id"`
	Type       string `db:"type"`
}

// captureEvidence is what invariants 20–26 are judged on: the database,
// the PSP's ledger and what the capture clients were told.
type captureEvidence struct {
	merchants     []string // merchant ids, by the index the records use
	payments      []dbCapturePayment
	keys          []dbCommandKey
	cancellations []dbCancellation
	refunds       []dbRefund
	events        []dbPaymentEvent // the payments' capture and cancel events
	ledger        fakeserver.Ledger
	stats         fakeserver.Stats
	ops           []*opRecord
	cancels       []*cancelRecord
	records       []*keyRecord // the POST /payments records of canceled keys
	// settled: every authorization ended and every cancellation finished
	// when the drain ended (left says what was not).
	settled bool
	left    string
}

func loadCaptureEvidence(ctx context.Context, dbx *sqlx.DB, merchants []merchant) (*captureEvidence, error) {
	ev := &captureEvidence{}
	for _, m := range merchants {
		ev.merchants = append(ev.merchants, m.ID)
	}
	if err := dbx.SelectContext(ctx, &ev.payments, `SELECT merchant_id, id, idem_key, merchant_order_id, status, capture_method,
    amount, currency, amount_captured, amount_reserved, amount_refunded, cancellation_reason, op_kind, op_key FROM payments`); err != nil {
		return nil, fmt.Errorf("read payments: %w", err)
	}
	if err := dbx.SelectContext(ctx, &ev.keys, `SELECT merchant_id, endpoint, idem_key, state, subject_id, fingerprint, response_status, response_body
    FROM idempotency_keys WHERE endpoint IN (?, ?, ?, ?)`, payments.EndpointCapturePayment, payments.EndpointCancelPayment,
		payments.EndpointCancelByKey, payments.EndpointCreatePayment); err != nil {
		return nil, fmt.Errorf("read command keys: %w", err)
	}
	if err := dbx.SelectContext(ctx, &ev.cancellations, `SELECT merchant_id, idem_key, cancel_key, status, payment_id, refund_id
    FROM key_cancellations`); err != nil {
		return nil, fmt.Errorf("read cancellations: %w", err)
	}
	if err := dbx.SelectContext(ctx, &ev.refunds, `SELECT merchant_id, id, payment_id, idem_key, refund_order_id, status,
    amount, currency, psp_reference, failure_code, review_reason FROM refunds`); err != nil {
		return nil, fmt.Errorf("read refunds: %w", err)
	}
	if err := dbx.SelectContext(ctx, &ev.events, `SELECT merchant_id, object_id, type FROM events
    WHERE object_type = ? AND type IN (?, ?, ?)`, payments.ObjectPayment, payments.EventPaymentCaptured,
		payments.EventPaymentPartiallyCaptured, payments.EventPaymentCanceled); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return ev, nil
}

// waitCapturesSettled polls until no authorization is left uncaptured, no
// capture or void is in flight and no cancellation by key is still being
// carried out (but those waiting for a person: a payment or a refund in
// requires_review), or limit passes. Authorizations nobody captured end at
// their capture_before, when the reconcilers record them expired.
func waitCapturesSettled(ctx context.Context, dbx *sqlx.DB, limit time.Duration) (ok bool, left string, err error) {
	deadline := time.Now().Add(limit)
	for {
		var open, inFlight, requested int
		err := dbx.QueryRowxContext(ctx, `SELECT
    (SELECT COUNT(*) FROM payments WHERE status = 'requires_capture'),
    (SELECT COUNT(*) FROM payments WHERE op_kind IS NOT NULL),
    (SELECT COUNT(*) FROM key_cancellations kc
        LEFT JOIN payments p ON p.merchant_id = kc.merchant_id AND p.id = kc.payment_id
        WHERE kc.status = 'cancel_requested' AND (p.status IS NULL OR p.status <> 'requires_review')
          AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.merchant_id = kc.merchant_id AND r.payment_id = kc.payment_id
                          AND r.status = 'requires_review'))`).Scan(&open, &inFlight, &requested)
		if err != nil {
			return false, "", fmt.Errorf("count open authorizations: %w", err)
		}
		left = fmt.Sprintf("%d authorizations open, %d operations in flight, %d cancellations requested", open, inFlight, requested)
		if open == 0 && inFlight == 0 && requested == 0 {
			return true, left, nil
		}
		if time.Now().After(deadline) {
			return false, left, nil
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return false, left, ctx.Err()
		}
	}
}

func newCaptureInvariants() []*invariant {
	names := []string{
		"captures: at most one PSP capture per capture key and per authorization, and it is the capture the gateway recorded",
		"captures: captured ≤ authorized; every authorization and its payment agree (captured, voided or lapsed)",
		"captures: no capture after a void and no void after a capture (PSP, rows, events, answers)",
		"captures: a payment's refunds never exceed what it captured",
		"captures: every PSP authorization ends captured, voided or expired in the gateway's records",
		"captures: every capture and void answer replays identically; refusals and other merchants store nothing",
		"cancel-by-key: a canceled key nets to zero at the PSP; a late duplicate never charges; every answer replays",
	}
	invs := make([]*invariant, len(names))
	for i, n := range names {
		invs[i] = &invariant{ID: captureInvariantBase + i, Name: n}
	}
	return invs
}

// Indexes into the list newCaptureInvariants returns.
const (
	ciOnce = iota
	ciWithinAuthorized
	ciExclusive
	ciRefunds
	ciEnded
	ciAnswers
	ciCancelByKey
)

type cmdRef struct{ merchant, endpoint, key string }

// captureIndex is the evidence looked up by what each invariant needs.
type captureIndex struct {
	pays, payByKey                    map[payRef]dbCapturePayment // by (merchant, id), (merchant, POST /payments key)
	payByOrder                        map[string]dbCapturePayment
	charges                           map[string]fakeserver.Charge
	auths                             map[string]fakeserver.Authorization
	capturesByOrder, capturesByCharge map[string][]fakeserver.Capture
	voidsByCharge                     map[string][]fakeserver.Void
	refundsByCharge                   map[string][]fakeserver.Refund
	keys                              map[cmdRef]dbCommandKey
	opKeysByPayment                   map[payRef][]dbCommandKey
	cancelOf                          map[payRef]dbCancellation // by (merchant, canceled key)
	canceledPayments                  map[payRef]bool
	// inReview are the payments a person decides on: in requires_review,
	// or with a refund there.
	inReview map[payRef]bool
	events   map[payRef][]string
}

func indexCaptures(ev *captureEvidence) captureIndex {
	x := captureIndex{pays: map[payRef]dbCapturePayment{}, payByKey: map[payRef]dbCapturePayment{}, payByOrder: map[string]dbCapturePayment{},
		charges: map[string]fakeserver.Charge{}, auths: map[string]fakeserver.Authorization{},
		capturesByOrder: map[string][]fakeserver.Capture{}, capturesByCharge: map[string][]fakeserver.Capture{},
		voidsByCharge: map[string][]fakeserver.Void{}, refundsByCharge: map[string][]fakeserver.Refund{},
		keys: map[cmdRef]dbCommandKey{}, opKeysByPayment: map[payRef][]dbCommandKey{}, cancelOf: map[payRef]dbCancellation{},
		canceledPayments: map[payRef]bool{}, inReview: map[payRef]bool{}, events: map[payRef][]string{}}
	for _, p := range ev.payments {
		x.pays[payRef{p.MerchantID, p.ID}] = p
		if p.Status == string(payments.RequiresReview) {
			x.inReview[payRef{p.MerchantID, p.ID}] = true
		}
		x.payByKey[payRef{p.MerchantID, p.IdemKey}] = p
		x.payByOrder[p.MerchantOrderID] = p
	}
	for _, ch := range ev.ledger.Charges {
		x.charges[ch.MerchantOrderID] = ch
	}
	for _, a := range ev.ledger.Authorizations {
		x.auths[a.MerchantOrderID] = a
	}
	for _, c := range ev.ledger.Captures {
		x.capturesByOrder[c.CaptureOrderID] = append(x.capturesByOrder[c.CaptureOrderID], c)
		x.capturesByCharge[c.MerchantOrderID] = append(x.capturesByCharge[c.MerchantOrderID], c)
	}
	for _, v := range ev.ledger.Voids {
		x.voidsByCharge[v.MerchantOrderID] = append(x.voidsByCharge[v.MerchantOrderID], v)
	}
	for _, lr := range ev.ledger.Refunds {
		x.refundsByCharge[lr.MerchantOrderID] = append(x.refundsByCharge[lr.MerchantOrderID], lr)
	}
	for _, k := range ev.keys {
		x.keys[cmdRef{k.MerchantID, k.Endpoint, k.IdemKey}] = k
		if k.Endpoint == payments.EndpointCapturePayment || k.Endpoint == payments.EndpointCancelPayment {
			x.opKeysByPayment[payRef{k.MerchantID, k.SubjectID}] = append(x.opKeysByPayment[payRef{k.MerchantID, k.SubjectID}], k)
		}
	}
	for _, kc := range ev.cancellations {
		x.cancelOf[payRef{kc.MerchantID, kc.Key}] = kc
		if kc.PaymentID.Valid {
			x.canceledPayments[payRef{kc.MerchantID, kc.PaymentID.String}] = true
		}
	}
	for _, rf := range ev.refunds {
		if rf.Status == string(payments.RefundRequiresReview) {
			x.inReview[payRef{rf.MerchantID, rf.PaymentID}] = true
		}
	}
	for _, e := range ev.events {
		x.events[payRef{e.MerchantID, e.ObjectID}] = append(x.events[payRef{e.MerchantID, e.ObjectID}], e.Type)
	}
	return x
}

// kept is what the PSP holds of order: captured less refunded, and
// whether it still holds an authorization (or a charge not finished).
func (x captureIndex) kept(order string) (net int64, held bool) {
	ch, ok := x.charges[order]
	if !ok {
		return 0, false
	}
	switch ch.Status {
	case "succeeded":
		net = ch.Amount
		if ch.AmountCaptured > 0 {
			net = ch.AmountCaptured
		}
	case "authorized", "pending":
		held = true
	}
	for _, lr := range x.refundsByCharge[order] {
		net -= lr.Amount
	}
	return net, held
}

// answered is the stored answer status of a completed key, 0 otherwise.
func answered(k dbCommandKey) int {
	if k.State != "COMPLETED" || !k.ResponseStatus.Valid {
		return 0
	}
	return int(k.ResponseStatus.Int32)
}

// checkCaptureState judges the invariants that need no HTTP, each by a
// function of its own.
func checkCaptureState(ev *captureEvidence, invs []*invariant) {
	x := indexCaptures(ev)
	checkCaptureOnce(ev, x, invs[ciOnce])
	checkCapturedWithinAuthorized(ev, x, invs[ciWithinAuthorized])
	checkCaptureExcludesVoid(ev, x, invs[ciExclusive])
	checkRefundsWithinCaptured(ev, x, invs[ciRefunds])
	checkAuthorizationsEnded(ev, x, invs[ciEnded])
	checkOperationAnswers(ev, x, invs[ciAnswers])
	checkCancellations(ev, x, invs[ciCancelByKey])
}

// checkCaptureOnce judges at most one PSP capture per capture order id and
// per authorization, each under the order id of a capture key of its
// payment that answers captured, and at most one such key per payment.
func checkCaptureOnce(ev *captureEvidence, x captureIndex, inv *invariant) {
	for _, order := range sortedKeys(x.capturesByOrder) {
		inv.Checked++
		if cs := x.capturesByOrder[order]; len(cs) > 1 {
			inv.fail("capture order %s was captured %d times at the PSP (%s, %s)", order, len(cs), cs[0].Reference, cs[1].Reference)
		}
	}
	for _, order := range sortedKeys(x.capturesByCharge) {
		inv.Checked++
		if cs := x.capturesByCharge[order]; len(cs) > 1 {
			inv.fail("the authorization of order %s was captured %d times at the PSP (orders %s, %s)", order, len(cs), cs[0].CaptureOrderID, cs[1].CaptureOrderID)
		}
	}
	for _, cp := range ev.ledger.Captures {
		inv.Checked++
		p, ok := x.payByOrder[cp.MerchantOrderID]
		if !ok {
			inv.fail("PSP capture %s (%d %s of order %s) belongs to no payment", cp.Reference, cp.Amount, cp.Currency, cp.MerchantOrderID)
			continue
		}
		var key *dbCommandKey
		for _, k := range x.opKeysByPayment[payRef{p.MerchantID, p.ID}] {
			if k.Endpoint == payments.EndpointCapturePayment && payments.OperationOrderID(payments.OpCapture, p.MerchantID, p.ID, k.IdemKey) == cp.CaptureOrderID {
				key = &k
			}
		}
		switch {
		case key == nil:
			inv.fail("the PSP captured %d %s of payment %s under order id %s, which no capture key of the payment derives", cp.Amount, cp.Currency, p.ID, cp.CaptureOrderID)
		case answered(*key) != 0 && answered(*key) != http.StatusCreated && p.Status != string(payments.RequiresReview):
			inv.fail("the PSP captured %d %s of payment %s under capture key %q, which answers %d", cp.Amount, cp.Currency, p.ID, key.IdemKey, answered(*key))
		}
	}
	for _, p := range ev.payments {
		if !p.manual() {
			continue
		}
		inv.Checked++
		var won []string
		for _, k := range x.opKeysByPayment[payRef{p.MerchantID, p.ID}] {
			if k.Endpoint == payments.EndpointCapturePayment && answered(k) == http.StatusCreated {
				won = append(won, k.IdemKey)
			}
		}
		switch {
		case len(won) > 1:
			inv.fail("payment %s: %d capture keys answer 201 captured (%q)", p.ID, len(won), won)
		case len(won) == 1 && len(x.capturesByOrder[payments.OperationOrderID(payments.OpCapture, p.MerchantID, p.ID, won[0])]) == 0:
			inv.fail("capture key %q of payment %s answers 201 captured, but the PSP holds no capture under its order id", won[0], p.ID)
		}
	}
	told := map[payRef][]string{}
	for _, op := range ev.ops {
		if _, ok := op.won(); ok && op.Kind == payments.OpCapture && op.Sender == op.Merchant {
			ref := payRef{merchantID(ev.merchants, op.Merchant), op.PaymentID}
			told[ref] = append(told[ref], op.Key)
		}
	}
	for _, ref := range sortedPayRefs(told) {
		inv.Checked++
		if keys := told[ref]; len(keys) > 1 {
			inv.fail("clients of %d capture keys of payment %s were told it was captured (%q)", len(keys), ref.id, keys)
		}
	}
}

func sortedPayRefs[V any](m map[payRef]V) []payRef {
	out := make([]payRef, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b payRef) int { return strings.Compare(a.merchant+"/"+a.id, b.merchant+"/"+b.id) })
	return out
}

// checkCapturedWithinAuthorized judges that no authorization gave more
// than it held, and that every one and its payment agree: captured ones
// succeeded with what the PSP took, voided and lapsed ones canceled, and
// open ones still authorizations.
func checkCapturedWithinAuthorized(ev *captureEvidence, x captureIndex, inv *invariant) {
	for _, a := range ev.ledger.Authorizations {
		inv.Checked++
		p, ok := x.payByOrder[a.MerchantOrderID]
		switch {
		case !ok:
			inv.fail("PSP authorization %s (order %s, %d %s) belongs to no payment", a.Reference, a.MerchantOrderID, a.Amount, a.Currency)
			continue
		case !p.manual():
			inv.fail("the PSP authorized order %s of payment %s, which is %s capture", a.MerchantOrderID, p.ID, p.CaptureMethod)
		}
		if a.AmountCaptured > a.Amount || a.AmountCaptured < 0 {
			inv.fail("the PSP captured %d %s of authorization %s, which held %d", a.AmountCaptured, a.Currency, a.Reference, a.Amount)
		}
		if p.Status == string(payments.RequiresReview) {
			inv.Notes = appendCapped(inv.Notes, fmt.Sprintf("authorization %s (%s) has payment %s in requires_review (allowed, needs a person)", a.Reference, a.Status, p.ID))
			continue
		}
		switch a.Status {
		case "succeeded":
			cs := x.capturesByCharge[a.MerchantOrderID]
			switch {
			case p.Status != string(payments.Succeeded):
				inv.fail("the PSP captured %d %s of authorization %s, but its payment %s is %s", a.AmountCaptured, a.Currency, a.Reference, p.ID, p.Status)
			case p.AmountCaptured != a.AmountCaptured:
				inv.fail("payment %s has amount_captured %d, the PSP captured %d %s of its authorization %s", p.ID, p.AmountCaptured, a.AmountCaptured, a.Currency, a.Reference)
			case len(cs) != 1 || cs[0].Amount != a.AmountCaptured:
				inv.fail("authorization %s took %d %s, its captures at the PSP are %+v", a.Reference, a.AmountCaptured, a.Currency, cs)
			}
		case "voided":
			if p.Status != string(payments.Canceled) {
				inv.fail("the PSP released authorization %s (lapsed %v), but its payment %s is %s", a.Reference, a.Lapsed, p.ID, p.Status)
			}
			if !a.Lapsed && len(x.voidsByCharge[a.MerchantOrderID]) == 0 {
				inv.fail("authorization %s is voided without a void or a lapse at the PSP", a.Reference)
			}
		case "authorized":
			if p.Status != string(payments.RequiresCapture) {
				inv.fail("the PSP still holds authorization %s (%d %s), but its payment %s is %s", a.Reference, a.Amount, a.Currency, p.ID, p.Status)
			}
		default:
			inv.fail("authorization %s has status %q", a.Reference, a.Status)
		}
	}
	for _, p := range ev.payments {
		if !p.manual() {
			continue
		}
		inv.Checked++
		if p.AmountCaptured < 0 || p.AmountCaptured > p.Amount {
			inv.fail("payment %s captured %d of an authorization of %d %s", p.ID, p.AmountCaptured, p.Amount, p.Currency)
		}
		if p.Status == string(payments.Succeeded) && p.AmountCaptured == 0 {
			inv.fail("payment %s is succeeded but captured nothing", p.ID)
		}
		if _, ok := x.auths[p.MerchantOrderID]; !ok && (p.Status == string(payments.Succeeded) || p.Status == string(payments.RequiresCapture)) {
			inv.fail("payment %s is %s, but the PSP never authorized its order %s", p.ID, p.Status, p.MerchantOrderID)
		}
	}
	for _, op := range ev.ops {
		v, ok := op.won()
		if !ok || op.Kind != payments.OpCapture {
			continue
		}
		inv.Checked++
		want := op.Amount
		if want == 0 {
			want = v.Amount
		}
		if v.AmountCaptured == nil || *v.AmountCaptured != want || want > v.Amount {
			inv.fail("capture key %q asked for %d of payment %s (%d %s), and was told %s", op.Key, op.Amount, op.PaymentID, v.Amount, v.Currency, capturedNote(v))
		}
	}
}

func capturedNote(v payments.View) string {
	if v.AmountCaptured == nil {
		return "no amount_captured"
	}
	return fmt.Sprintf("amount_captured %d", *v.AmountCaptured)
}

// checkCaptureExcludesVoid judges that no authorization was both captured
// and voided: at the PSP, in the keys' answers, in the events, in what the
// PSP did against what a key answered, and in every operation sent after
// another won (each must have been refused).
func checkCaptureExcludesVoid(ev *captureEvidence, x captureIndex, inv *invariant) {
	for _, a := range ev.ledger.Authorizations {
		inv.Checked++
		if len(x.capturesByCharge[a.MerchantOrderID]) > 0 && len(x.voidsByCharge[a.MerchantOrderID]) > 0 {
			inv.fail("authorization %s (order %s) was both captured and voided at the PSP", a.Reference, a.MerchantOrderID)
		}
	}
	for _, p := range ev.payments {
		if !p.manual() {
			continue
		}
		inv.Checked++
		var captured, voided string
		for _, k := range x.opKeysByPayment[payRef{p.MerchantID, p.ID}] {
			switch {
			case k.Endpoint == payments.EndpointCapturePayment && answered(k) == http.StatusCreated:
				captured = k.IdemKey
			case k.Endpoint == payments.EndpointCancelPayment && answered(k) == http.StatusOK:
				voided = k.IdemKey
			}
		}
		if captured != "" && voided != "" {
			inv.fail("payment %s: capture key %q answers captured and void key %q answers voided", p.ID, captured, voided)
		}
		evs := x.events[payRef{p.MerchantID, p.ID}]
		if (slices.Contains(evs, string(payments.EventPaymentCaptured)) || slices.Contains(evs, string(payments.EventPaymentPartiallyCaptured))) &&
			slices.Contains(evs, string(payments.EventPaymentCanceled)) {
			inv.fail("payment %s has both a capture event and payment.canceled: %q", p.ID, evs)
		}
		a, ok := x.auths[p.MerchantOrderID]
		switch {
		case !ok:
		case voided != "" && a.Status == "succeeded":
			inv.fail("void key %q of payment %s answers voided, but the PSP captured %d %s of authorization %s", voided, p.ID, a.AmountCaptured, a.Currency, a.Reference)
		case captured != "" && a.Status == "voided":
			inv.fail("capture key %q of payment %s answers captured, but the PSP released authorization %s (lapsed %v)", captured, p.ID, a.Reference, a.Lapsed)
		}
	}
	for _, op := range ev.ops {
		if op.MustRefuse == nil || op.Sender != op.Merchant {
			continue
		}
		op.mu.Lock()
		answers, refused := op.Answers, op.Refused
		op.mu.Unlock()
		inv.Checked++
		for _, a := range answers {
			inv.fail("a %s of payment %s (key %q) that must be refused (%s) was answered %d: %s", op.Kind, op.PaymentID, op.Key, strings.Join(op.MustRefuse, " or "), a.Status, a.Body)
		}
		for _, a := range refused {
			if !slices.Contains(op.MustRefuse, a.Type) {
				inv.fail("a %s of payment %s (key %q) was refused %d %s, want %s", op.Kind, op.PaymentID, op.Key, a.Status, a.Type, strings.Join(op.MustRefuse, " or "))
			}
		}
	}
}

// checkRefundsWithinCaptured judges that the PSP gave back no more of a
// charge than it captured, that no payment's refunds hold more than it
// captured, and that the gateway never asked the PSP for more (the PSP's
// refusal amount_exceeds_refundable).
func checkRefundsWithinCaptured(ev *captureEvidence, x captureIndex, inv *invariant) {
	for _, order := range sortedKeys(x.refundsByCharge) {
		inv.Checked++
		ch, ok := x.charges[order]
		if !ok {
			continue // invariant 12 names it
		}
		var captured, sum int64
		if ch.Status == "succeeded" {
			captured = ch.Amount
			if ch.AmountCaptured > 0 {
				captured = ch.AmountCaptured
			}
		}
		for _, lr := range x.refundsByCharge[order] {
			sum += lr.Amount
		}
		if sum > captured {
			inv.fail("the PSP refunded %d %s of order %s (%s), which captured %d of %d", sum, ch.Currency, order, ch.Status, captured, ch.Amount)
		}
	}
	for _, p := range ev.payments {
		inv.Checked++
		if c := p.captured(); p.AmountRefunded > c || p.AmountReserved > c {
			inv.fail("payment %s (%s, %s) captured %d %s, its refunds hold %d and gave back %d", p.ID, p.CaptureMethod, p.Status, c, p.Currency, p.AmountReserved, p.AmountRefunded)
		}
	}
	for _, rf := range ev.refunds {
		if rf.Status == string(payments.RefundFailed) && rf.FailureCode.String == psp.RefundDeclineAmountExceeded {
			inv.Checked++
			inv.fail("refund %s of payment %s (%d %s) failed %s: the gateway asked the PSP for more than the payment captured",
				rf.ID, rf.PaymentID, rf.Amount, rf.Currency, rf.FailureCode.String)
		}
	}
}

// checkAuthorizationsEnded judges that after the drain nothing is left
// authorized, in flight or in progress: every authorization captured,
// voided or expired in the gateway's records, and the PSP holding none.
func checkAuthorizationsEnded(ev *captureEvidence, x captureIndex, inv *invariant) {
	if !ev.settled {
		inv.fail("the reconcilers did not end every authorization and cancellation within the settle timeout: %s", ev.left)
	}
	ended := map[string]int{}
	for _, p := range ev.payments {
		if !p.manual() {
			continue
		}
		inv.Checked++
		switch {
		case p.Status == string(payments.RequiresCapture):
			inv.fail("payment %s (order %s, %d %s) is still an authorization", p.ID, p.MerchantOrderID, p.Amount, p.Currency)
		case p.OpKind.Valid:
			inv.fail("payment %s (%s) still has a %s in flight (key %q)", p.ID, p.Status, p.OpKind.String, p.OpKey.String)
		}
		status := p.Status
		if p.CancellationReason.Valid {
			status += " (" + p.CancellationReason.String + ")"
		}
		ended[status]++
	}
	for _, a := range ev.ledger.Authorizations {
		inv.Checked++
		if a.Status == "authorized" {
			inv.fail("the PSP still holds authorization %s (order %s, %d %s)", a.Reference, a.MerchantOrderID, a.Amount, a.Currency)
		}
	}
	for _, k := range ev.keys {
		if k.Endpoint == payments.EndpointCreatePayment {
			continue // invariant 3
		}
		inv.Checked++
		if k.State != "COMPLETED" {
			inv.fail("%s key %q of merchant %s is %s (payment %s)", k.Endpoint, k.IdemKey, k.MerchantID, k.State, k.SubjectID)
		}
	}
	inv.Notes = append(inv.Notes, "manual payments: "+kv(ended))
}

// checkOperationAnswers judges what the capture clients were told: the
// same answer to every copy of a request, refusals that stored nothing,
// another merchant's requests refused 404 with nothing stored, answers
// that name their payment, and no key but the clients' (and those of
// cancellations by key).
func checkOperationAnswers(ev *captureEvidence, x captureIndex, inv *invariant) {
	known := map[cmdRef]bool{}
	for _, op := range ev.ops {
		ref := cmdRef{merchantID(ev.merchants, op.Sender), op.endpoint(), op.Key}
		known[ref] = true
		op.mu.Lock()
		answers, refused, unexpected, conflicts := op.Answers, op.Refused, op.Unexpected, op.Conflicts
		unsure := op.Abandoned || op.GaveUp
		op.mu.Unlock()
		inv.Checked++
		for _, a := range answers[min(1, len(answers)):] {
			if a.Status != answers[0].Status || !bytes.Equal(a.Body, answers[0].Body) {
				if answers[0].Status == http.StatusAccepted {
					continue // in review then settled: the answer follows the payment
				}
				inv.fail("two clients of %s key %q were told different things: %d %s / %d %s", op.Kind, op.Key, answers[0].Status, answers[0].Body, a.Status, a.Body)
				break
			}
		}
		for _, a := range unexpected {
			inv.fail("a correct %s of payment %s (key %q) got %d %s: %s", op.Kind, op.PaymentID, op.Key, a.Status, a.Type, a.Body)
		}
		for _, a := range conflicts {
			inv.Checked++
			if a.Status != http.StatusUnprocessableEntity || a.Type != "idempotency-key-mismatch" {
				inv.fail("another body for %s key %q got %d %s, want 422 idempotency-key-mismatch", op.Kind, op.Key, a.Status, a.Body)
			}
		}
		k, hasKey := x.keys[ref]
		if op.Sender != op.Merchant {
			for _, a := range append(slices.Clone(answers), refused...) {
				if a.Status != http.StatusNotFound || a.Type != problemNotFound {
					inv.fail("merchant %d's %s of merchant %d's payment %s got %d %s", op.Sender, op.Kind, op.Merchant, op.PaymentID, a.Status, a.Body)
				}
			}
			if hasKey {
				inv.fail("merchant %d's %s of merchant %d's payment %s left key %q behind", op.Sender, op.Kind, op.Merchant, op.PaymentID, op.Key)
			}
			continue
		}
		if len(refused) > 0 && len(answers) == 0 && !unsure && hasKey {
			inv.fail("%s key %q was refused with %d %s, yet was stored (%s)", op.Kind, op.Key, refused[0].Status, refused[0].Type, k.State)
		}
		if len(answers) == 0 {
			continue
		}
		var v payments.View
		switch {
		case !hasKey:
			inv.fail("%s key %q was answered %d, but is not stored", op.Kind, op.Key, answers[0].Status)
		case k.SubjectID != op.PaymentID:
			inv.fail("%s key %q of payment %s is stored for payment %s", op.Kind, op.Key, op.PaymentID, k.SubjectID)
		case json.Unmarshal(answers[0].Body, &v) != nil || v.ID != op.PaymentID:
			inv.fail("%s key %q of payment %s was answered %d with another body: %s", op.Kind, op.Key, op.PaymentID, answers[0].Status, answers[0].Body)
		}
	}
	for _, k := range ev.keys {
		if k.Endpoint != payments.EndpointCapturePayment && k.Endpoint != payments.EndpointCancelPayment {
			continue
		}
		inv.Checked++
		derived := k.Endpoint == payments.EndpointCancelPayment && strings.HasPrefix(k.IdemKey, "cbk_") && x.canceledPayments[payRef{k.MerchantID, k.SubjectID}]
		if !known[cmdRef{k.MerchantID, k.Endpoint, k.IdemKey}] && !derived {
			inv.fail("%s key %q of merchant %s (payment %s) matches no operation a client asked for", k.Endpoint, k.IdemKey, k.MerchantID, k.SubjectID)
		}
	}
}

// checkCancellations judges every cancellation by key: finished, and the
// PSP's ledger netting to zero for its key (charge refunded, authorization
// voided or lapsed, or nothing charged); a key canceled before anything
// claimed it holding the tombstone and no payment or charge, however late
// a duplicate came; and the clients told what the row says.
func checkCancellations(ev *captureEvidence, x captureIndex, inv *invariant) {
	asked := map[payRef]bool{} // (merchant, own key)
	for _, c := range ev.cancels {
		asked[payRef{merchantID(ev.merchants, c.Merchant), c.OwnKey}] = true
	}
	finished := map[string]int{}
	for _, kc := range ev.cancellations {
		inv.Checked++
		finished[kc.Status]++
		order := payments.MerchantOrderID(kc.MerchantID, kc.Key)
		net, held := x.kept(order)
		switch payments.CancellationStatus(kc.Status) {
		case payments.CancellationCanceled, payments.CancellationVoided, payments.CancellationRefunded:
			if net != 0 || held {
				inv.fail("key %q of merchant %s was canceled (%s), but the PSP keeps %d of order %s (holding an authorization: %v)", kc.Key, kc.MerchantID, kc.Status, net, order, held)
			}
		case payments.CancellationReview:
			inv.Notes = appendCapped(inv.Notes, fmt.Sprintf("the cancellation of key %q (payment %s) is in requires_review (allowed, needs a person)", kc.Key, kc.PaymentID.String))
		case payments.CancellationRequested:
			if x.inReview[payRef{kc.MerchantID, kc.PaymentID.String}] {
				inv.Notes = appendCapped(inv.Notes, fmt.Sprintf("the cancellation of key %q waits for payment %s, in review (allowed, needs a person)", kc.Key, kc.PaymentID.String))
				break
			}
			inv.fail("the cancellation of key %q of merchant %s (payment %s) is still cancel_requested", kc.Key, kc.MerchantID, kc.PaymentID.String)
		default:
			inv.fail("the cancellation of key %q has status %q", kc.Key, kc.Status)
		}
		p, hasPay := x.payByKey[payRef{kc.MerchantID, kc.Key}]
		switch {
		case !kc.PaymentID.Valid:
			if hasPay {
				inv.fail("key %q of merchant %s was canceled before anything claimed it, yet has payment %s (%s)", kc.Key, kc.MerchantID, p.ID, p.Status)
			}
			if ch, ok := x.charges[order]; ok {
				inv.fail("key %q of merchant %s was canceled before anything claimed it, yet the PSP has charge %s (%s) for its order", kc.Key, kc.MerchantID, ch.Reference, ch.Status)
			}
			if k, ok := x.keys[cmdRef{kc.MerchantID, payments.EndpointCreatePayment, kc.Key}]; !ok || !k.canceledBeforeClaimed() {
				inv.fail("key %q of merchant %s was canceled before anything claimed it, but does not hold the cancellation (stored: %v, %s, payment %q)", kc.Key, kc.MerchantID, ok, k.State, k.SubjectID)
			}
		case !hasPay || p.ID != kc.PaymentID.String:
			inv.fail("the cancellation of key %q of merchant %s names payment %s, the key's payment is %q", kc.Key, kc.MerchantID, kc.PaymentID.String, p.ID)
		}
		if !asked[payRef{kc.MerchantID, kc.CancelKey}] {
			inv.fail("the cancellation of key %q of merchant %s (own key %q) matches no cancellation a client asked for", kc.Key, kc.MerchantID, kc.CancelKey)
		}
	}
	inv.Notes = append(inv.Notes, "cancellations: "+kv(finished))
	for _, rec := range ev.records {
		mid := merchantID(ev.merchants, rec.Merchant)
		rec.mu.Lock()
		canceled, answers := rec.Canceled, rec.Answers
		rec.mu.Unlock()
		if len(canceled) == 0 {
			continue
		}
		inv.Checked++
		kc, ok := x.cancelOf[payRef{mid, rec.Key}]
		switch {
		case !ok || kc.PaymentID.Valid:
			inv.fail("a request with key %q of merchant %s was answered canceled-by-key, but the key was not canceled before anything claimed it", rec.Key, mid)
		case len(answers) > 0:
			inv.fail("key %q of merchant %s was answered canceled-by-key and %d", rec.Key, mid, answers[0].Status)
		}
	}
	for _, c := range ev.cancels {
		mid := merchantID(ev.merchants, c.Merchant)
		c.mu.Lock()
		answers, refused, unexpected, conflicts := c.Answers, c.Refused, c.Unexpected, c.Conflicts
		c.mu.Unlock()
		inv.Checked++
		for _, a := range answers[min(1, len(answers)):] {
			if answers[0].Status != http.StatusAccepted && (a.Status != answers[0].Status || !bytes.Equal(a.Body, answers[0].Body)) {
				inv.fail("two clients of cancellation %q were told different things: %d %s / %d %s", c.OwnKey, answers[0].Status, answers[0].Body, a.Status, a.Body)
				break
			}
		}
		for _, a := range unexpected {
			inv.fail("a correct cancellation of key %q (own key %q) got %d %s: %s", c.Key, c.OwnKey, a.Status, a.Type, a.Body)
		}
		for _, a := range conflicts {
			inv.Checked++
			if a.Status != http.StatusUnprocessableEntity || a.Type != "idempotency-key-mismatch" {
				inv.fail("another body for cancellation %q got %d %s, want 422 idempotency-key-mismatch", c.OwnKey, a.Status, a.Body)
			}
		}
		kc, has := x.cancelOf[payRef{mid, c.Key}]
		if len(answers) > 0 {
			var v payments.CancellationView
			switch {
			case !has || kc.CancelKey != c.OwnKey:
				inv.fail("cancellation %q of key %q was answered %d, but the key's cancellation is %q's", c.OwnKey, c.Key, answers[0].Status, kc.CancelKey)
			case json.Unmarshal(answers[0].Body, &v) != nil || v.Object != "cancellation" || v.IdempotencyKey != c.Key:
				inv.fail("cancellation %q of key %q was answered %d with another body: %s", c.OwnKey, c.Key, answers[0].Status, answers[0].Body)
			case answers[0].Status == http.StatusOK && string(v.Status) != kc.Status:
				inv.fail("cancellation %q of key %q was told %s, its row says %s", c.OwnKey, c.Key, v.Status, kc.Status)
			}
		}
		if len(refused) > 0 && (!has || kc.CancelKey == c.OwnKey) {
			inv.fail("cancellation %q of key %q was refused 409 %s, but no other cancellation of the key exists", c.OwnKey, c.Key, refused[0].Type)
		}
	}
}

// check judges invariants 20–26 once the other checks are done: it replays
// capture, void and cancellation keys and sends late duplicates over HTTP,
// so the replicas must be up and the faults off.
func (cl *captureLoad) check(ctx context.Context, c *checker, settled bool, left string) ([]*invariant, *captureEvidence, error) {
	ev, err := loadCaptureEvidence(ctx, c.e.db, c.e.merchants)
	if err != nil {
		return nil, nil, err
	}
	// The ledger after the database: whatever the gateway recorded, the
	// PSP has done by now.
	if ev.ledger, err = c.fetchLedger(ctx); err != nil {
		return nil, nil, err
	}
	if ev.stats, err = fetchStats(ctx, c.e.pspURL); err != nil {
		return nil, nil, err
	}
	cl.mu.Lock()
	ev.ops, ev.cancels = slices.Clone(cl.ops), slices.Clone(cl.cancels)
	cl.mu.Unlock()
	c.w.mu.Lock()
	for _, rec := range c.w.order {
		if rec.CancelByKey {
			ev.records = append(ev.records, rec)
		}
	}
	c.w.mu.Unlock()
	ev.settled, ev.left = settled, left
	invs := newCaptureInvariants()
	checkCaptureState(ev, invs)
	if err := cl.checkReplays(ctx, c, ev, invs[ciAnswers], invs[ciCancelByKey]); err != nil {
		return nil, nil, err
	}
	return invs, ev, nil
}

// checkReplays posts every capture, void and cancellation key that is
// stored again with its body: the answer must be a replay of what is
// stored and of what the clients were told (unless that was a 202), and
// must move no money. Then every key canceled before anything claimed it
// is posted to POST /payments once more, as a late duplicate: it must be
// answered with the cancellation and charge nothing.
func (cl *captureLoad) checkReplays(ctx context.Context, c *checker, ev *captureEvidence, opsInv, cancelInv *invariant) error {
	x := indexCaptures(ev)
	type job struct {
		path, apiKey, key string
		body              []byte
		stored            dbCommandKey
		first             *answer
		judge             func(a answer, stored []byte)
	}
	var jobs []job
	for _, op := range ev.ops {
		k, ok := x.keys[cmdRef{merchantID(ev.merchants, op.Sender), op.endpoint(), op.Key}]
		if !ok || op.Sender != op.Merchant {
			continue
		}
		op.mu.Lock()
		var first *answer
		if len(op.Answers) > 0 && op.Answers[0].Status != http.StatusAccepted {
			first = &op.Answers[0]
		}
		op.mu.Unlock()
		jobs = append(jobs, job{path: op.path(), apiKey: c.e.merchants[op.Merchant].APIKey, key: op.Key, body: op.Body, stored: k, first: first,
			judge: func(a answer, stored []byte) {
				var v payments.View
				if json.Unmarshal(a.Body, &v) != nil || v.ID != op.PaymentID {
					opsInv.fail("replay of %s key %q is not its payment %s: %s", op.Kind, op.Key, op.PaymentID, a.Body)
				}
			}})
	}
	for _, cr := range ev.cancels {
		mid := merchantID(ev.merchants, cr.Merchant)
		k, ok := x.keys[cmdRef{mid, payments.EndpointCancelByKey, cr.OwnKey}]
		if !ok {
			continue
		}
		cr.mu.Lock()
		var first *answer
		if len(cr.Answers) > 0 && cr.Answers[0].Status != http.StatusAccepted {
			first = &cr.Answers[0]
		}
		cr.mu.Unlock()
		jobs = append(jobs, job{path: "/payments/cancel_by_key", apiKey: c.e.merchants[cr.Merchant].APIKey, key: cr.OwnKey, body: cr.Body, stored: k, first: first,
			judge: func(a answer, stored []byte) {
				var v payments.CancellationView
				waits := x.inReview[payRef{mid, x.cancelOf[payRef{mid, cr.Key}].PaymentID.String}]
				switch {
				case a.Status != http.StatusOK && !waits:
					cancelInv.fail("cancellation %q of key %q still answers %d: %s", cr.OwnKey, cr.Key, a.Status, a.Body)
				case json.Unmarshal(a.Body, &v) != nil || v.IdempotencyKey != cr.Key:
					cancelInv.fail("replay of cancellation %q is not of key %q: %s", cr.OwnKey, cr.Key, a.Body)
				}
			}})
	}
	ledgerBefore := ev.ledger
	var mu sync.Mutex
	work := make(chan job)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(rand.Uint64(), 0))
			for j := range work {
				a, err := c.replayKeyed(ctx, r, j.path, j.apiKey, j.key, j.body)
				stored := j.stored.ResponseBody
				if err == nil && !bytes.Equal(a.Body, stored) {
					// A 202 may have been settled since the evidence was read.
					var now []byte
					if gerr := c.e.db.GetContext(ctx, &now, `SELECT response_body FROM idempotency_keys WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?`,
						j.stored.MerchantID, j.stored.Endpoint, j.stored.IdemKey); gerr == nil {
						stored = now
					}
				}
				mu.Lock()
				inv := opsInv
				if j.stored.Endpoint == payments.EndpointCancelByKey {
					inv = cancelInv
				}
				switch {
				case err != nil:
					// Faults are off: a key that cannot be replayed breaks the rule.
					inv.Checked++
					inv.fail("%v", err)
				case !opFinal(a.Status) || !a.Replayed:
					inv.Checked++
					inv.fail("replay of %s key %q answered %d (Idempotent-Replayed %v): %s", j.stored.Endpoint, j.key, a.Status, a.Replayed, a.Body)
				default:
					inv.Checked++
					if !bytes.Equal(a.Body, stored) {
						inv.fail("replay of %s key %q differs from the stored answer: %s / %s", j.stored.Endpoint, j.key, a.Body, stored)
					}
					if j.first != nil && (a.Status != j.first.Status || !bytes.Equal(a.Body, j.first.Body)) {
						inv.fail("%s key %q: the client was told %d %s, a replay now says %d %s", j.stored.Endpoint, j.key, j.first.Status, j.first.Body, a.Status, a.Body)
					}
					j.judge(a, stored)
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	// Late duplicates of the keys canceled before anything claimed them.
	r := rand.New(rand.NewPCG(c.e.opts.seed, 26))
	for _, kc := range ev.cancellations {
		if kc.PaymentID.Valid {
			continue
		}
		m := slices.Index(ev.merchants, kc.MerchantID)
		if m < 0 {
			continue
		}
		cancelInv.Checked++
		late := map[string]any{"amount": 100 + r.Int64N(500_000), "currency": currencies[r.IntN(len(currencies))], "payment_method": "pm_card_ok"}
		if r.IntN(2) == 0 {
			late["capture_method"] = string(payments.CaptureManual)
		}
		a, err := c.replayKeyed(ctx, r, "/payments", c.e.merchants[m].APIKey, kc.Key, mustJSON(late))
		switch {
		case err != nil:
			cancelInv.fail("a late duplicate of canceled key %q of merchant %s: %v", kc.Key, kc.MerchantID, err)
		case a.Status != http.StatusConflict || a.Type != "canceled-by-key":
			cancelInv.fail("a late duplicate of canceled key %q of merchant %s got %d %s", kc.Key, kc.MerchantID, a.Status, a.Body)
		}
	}
	after, err := c.fetchLedger(ctx)
	if err != nil {
		return err
	}
	if len(after.Charges) != len(ledgerBefore.Charges) || len(after.Refunds) != len(ledgerBefore.Refunds) {
		cancelInv.fail("replays and late duplicates made %d new PSP charges and %d refunds",
			len(after.Charges)-len(ledgerBefore.Charges), len(after.Refunds)-len(ledgerBefore.Refunds))
	}
	if len(after.Captures) != len(ledgerBefore.Captures) || len(after.Voids) != len(ledgerBefore.Voids) {
		opsInv.fail("replaying capture and void keys made %d new PSP captures and %d voids",
			len(after.Captures)-len(ledgerBefore.Captures), len(after.Voids)-len(ledgerBefore.Voids))
	}
	return nil
}

// replayKeyed posts body to path with key; faults are off, so only a
// restarting replica may need a retry.
func (c *checker) replayKeyed(ctx context.Context, r *rand.Rand, path, apiKey, key string, body []byte) (answer, error) {
	var last error
	for attempt := 1; attempt <= 10; attempt++ {
		base := c.e.replicas[r.IntN(len(c.e.replicas))].url()
		a, err := postKeyed(ctx, c.http, base+path, apiKey, key, body, 10*time.Second)
		if err == nil && !retryable(a) {
			return a, nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("%d %s", a.Status, a.Body)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			break
		}
	}
	return answer{}, fmt.Errorf("replay of %s key %q: %v", path, key, last)
}
