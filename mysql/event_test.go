package mysql_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"gateway/idemkeys"
	"gateway/listings"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
)

func newEventScenario(t *testing.T) *scenario {
	t.Helper()
	dbx := mysqltest.MustOpen(t)
	return &scenario{t: t, ctx: context.Background(), s: mysql.NewStore(dbx), setup: dbx}
}

// storedEvent is an event row as the tests read it.
type storedEvent struct {
	Pos  int64  `db:"pos"`
	Type string `db:"type"`
	Seq  int64  `db:"seq"`
	Data string `db:"data"`
}

// events reads an object's events in the order written.
func (sc *scenario) events(objectID string) []storedEvent {
	sc.t.Helper()
	var out []storedEvent
	if err := sc.setup.SelectContext(sc.ctx, &out, `SELECT pos, type, seq, data FROM events WHERE object_id = ? ORDER BY pos`, objectID); err != nil {
		sc.t.Fatal(err)
	}
	return out
}

// wantEvents checks an object's events: these types, numbered 1…n in the
// order written, each carrying the object in the status its type names,
// and the object's event_seq at n.
func (sc *scenario) wantEvents(table, objectID string, types ...payments.EventType) {
	sc.t.Helper()
	evs := sc.events(objectID)
	if len(evs) != len(types) {
		sc.t.Fatalf("%s: %d events %+v, want %v", objectID, len(evs), evs, types)
	}
	for i, ev := range evs {
		var data struct {
			ID           string `json:"id"`
			Status       string `json:"status"`
			ClientSecret string `json:"client_secret"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &data); err != nil {
			sc.t.Fatalf("%s: event %d data %q: %v", objectID, i, ev.Data, err)
		}
		_, status, _ := cutType(ev.Type)
		if ev.Type != string(types[i]) || ev.Seq != int64(i+1) || data.ID != objectID || data.Status != status || data.ClientSecret != "" {
			sc.t.Fatalf("%s: event %d is %+v, want %s seq %d", objectID, i, ev, types[i], i+1)
		}
	}
	if n := mysqltest.Count(sc.t, sc.setup, `SELECT event_seq FROM `+table+` WHERE id = ?`, objectID); n != len(types) {
		sc.t.Fatalf("%s: event_seq %d, want %d", objectID, n, len(types))
	}
}

func cutType(t string) (object, status string, ok bool) {
	for i := range t {
		if t[i] == '.' {
			return t[:i], t[i+1:], true
		}
	}
	return "", "", false
}

// A settle whose transaction rolls back leaves neither its change nor its
// event: fenced (another token), or failed at the event's insert (a
// trigger refuses it). The same settle, once it can commit, writes its
// change and exactly one event. Refunds likewise, with their payment's
// amounts.
func TestSettleRolledBackLeavesNoEvent(t *testing.T) {
	sc := newEventScenario(t)
	ctx, s := sc.ctx, sc.s
	m, _ := sc.merchant("m")

	p, ref, tok := sc.claim(m.ID, "k1", time.Minute)
	sc.wantEvents("payments", p.ID, payments.EventPaymentProcessing)
	p.Status, p.PSPReference = payments.Succeeded, "ch_1"

	// Fenced: a stale token.
	err := s.Settle(ctx, ref, tok.Next(), payments.PaymentSettled(p))
	sc.mustIs(err, idemkeys.ErrFenced, "Settle with another token")
	sc.wantEvents("payments", p.ID, payments.EventPaymentProcessing)
	if n := mysqltest.Count(t, sc.setup, `SELECT COUNT(*) FROM payments WHERE id = ? AND status = 'processing' AND psp_reference IS NULL`, p.ID); n != 1 {
		t.Fatal("a fenced settle changed the payment")
	}
	if n := mysqltest.Count(t, sc.setup, `SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`); n != 1 {
		t.Fatal("a fenced settle completed the key")
	}

	// The event's insert fails: the key and the payment roll back with it.
	sc.exec(`CREATE TRIGGER events_refused BEFORE INSERT ON events FOR EACH ROW
IF NEW.type IN ('payment.succeeded', 'refund.succeeded') THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF`)
	err = s.Settle(ctx, ref, tok, payments.PaymentSettled(p))
	if err == nil || errors.Is(err, idemkeys.ErrFenced) {
		t.Fatalf("Settle with its event refused: %v", err)
	}
	sc.wantEvents("payments", p.ID, payments.EventPaymentProcessing)
	if n := mysqltest.Count(t, sc.setup, `SELECT COUNT(*) FROM payments WHERE id = ? AND status = 'processing' AND psp_reference IS NULL`, p.ID); n != 1 {
		t.Fatal("a settle whose event failed changed the payment")
	}
	if n := mysqltest.Count(t, sc.setup, `SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`); n != 1 {
		t.Fatal("a settle whose event failed completed the key")
	}

	// A refund's settle refused at its event: the refund, its key and the
	// payment's amounts stay as they were.
	sc.exec(`DROP TRIGGER events_refused`)
	sc.must(s.Settle(ctx, ref, tok, payments.PaymentSettled(p)), "Settle")
	sc.wantEvents("payments", p.ID, payments.EventPaymentProcessing, payments.EventPaymentSucceeded)
	r, rref, rtok := sc.claimRefund(p, "r1", time.Minute)
	sc.exec(`CREATE TRIGGER events_refused BEFORE INSERT ON events FOR EACH ROW
IF NEW.type = 'refund.succeeded' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF`)
	r.Status, r.PSPReference = payments.RefundSucceeded, "rf_1"
	if err := s.SettleRefund(ctx, rref, rtok, payments.RefundSettled(r)); err == nil {
		t.Fatal("SettleRefund with its event refused succeeded")
	}
	sc.wantEvents("refunds", r.ID, payments.EventRefundPending)
	if n := mysqltest.Count(t, sc.setup, `SELECT COUNT(*) FROM payments WHERE id = ? AND amount_refunded = 0 AND amount_reserved = 100`, p.ID); n != 1 {
		t.Fatal("a refund settle whose event failed moved the payment's amounts")
	}
	sc.mustIs(s.SettleRefund(ctx, rref, rtok.Next(), payments.RefundSettled(r)), idemkeys.ErrFenced, "SettleRefund with another token")
	sc.exec(`DROP TRIGGER events_refused`)
	sc.must(s.SettleRefund(ctx, rref, rtok, payments.RefundSettled(r)), "SettleRefund")
	sc.wantEvents("refunds", r.ID, payments.EventRefundPending, payments.EventRefundSucceeded)
	if n := mysqltest.Count(t, sc.setup, `SELECT COUNT(*) FROM payments WHERE id = ? AND amount_refunded = 100 AND amount_reserved = 100`, p.ID); n != 1 {
		t.Fatal("the refund's settle did not move the payment's amounts")
	}
	// Settled already: a second settle is fenced and writes nothing.
	sc.mustIs(s.Settle(ctx, ref, tok, payments.PaymentSettled(p)), idemkeys.ErrFenced, "Settle of a settled payment")
	sc.mustIs(s.SettleRefund(ctx, rref, rtok, payments.RefundSettled(r)), idemkeys.ErrFenced, "SettleRefund of a settled refund")
	sc.wantEvents("payments", p.ID, payments.EventPaymentProcessing, payments.EventPaymentSucceeded)
	sc.wantEvents("refunds", r.ID, payments.EventRefundPending, payments.EventRefundSucceeded)
}

// One payment's and one refund's whole lives: every change of status is one
// event, numbered in order; a write that leaves the status as it was (a
// refund still pending at its PSP, a look that learns nothing) is none.
func TestEventsFollowEveryChange(t *testing.T) {
	sc := newEventScenario(t)
	ctx, s := sc.ctx, sc.s
	m, _ := sc.merchant("m")
	res := payments.Resolution{Reason: "test", Actor: "ops@example.com"}

	// Payment: created, sent to review, resolved by ops, a no-op resolve.
	p, ref, tok := sc.claim(m.ID, "k1", time.Minute)
	p.Status, p.ReviewReason = payments.RequiresReview, "unknown outcome"
	sc.must(s.Settle(ctx, ref, tok, payments.PaymentSettled(p)), "Settle to review")
	to := func(st payments.Status) func(payments.Payment) (payments.Payment, error) {
		return func(x payments.Payment) (payments.Payment, error) {
			x.Status, x.PSPReference = st, "ch_9"
			return x, nil
		}
	}
	_, err := s.Resolve(ctx, p.ID, payments.ChangePayment(to(payments.Succeeded)), res)
	sc.must(err, "Resolve to succeeded")
	_, err = s.Resolve(ctx, p.ID, payments.ChangePayment(to(payments.Succeeded)), res)
	sc.must(err, "Resolve to the same status")
	sc.wantEvents("payments", p.ID, payments.EventPaymentProcessing, payments.EventPaymentRequiresReview, payments.EventPaymentSucceeded)

	// Refund: created, pending at its PSP (no change), to review by ops, then failed.
	r, rref, rtok := sc.claimRefund(p, "r1", time.Minute)
	r.Status, r.PSPReference = payments.RefundPending, "rf_1"
	sc.must(s.SettleRefund(ctx, rref, rtok, payments.RefundSettled(r)), "SettleRefund pending")
	rto := func(st payments.RefundStatus) func(payments.Refund) (payments.Refund, error) {
		return func(x payments.Refund) (payments.Refund, error) { x.Status = st; return x, nil }
	}
	_, err = s.ResolveRefund(ctx, r.ID, payments.ChangeRefund(rto(payments.RefundRequiresReview)), res)
	sc.must(err, "ResolveRefund to review")
	_, err = s.ResolveRefund(ctx, r.ID, payments.ChangeRefund(rto(payments.RefundFailed)), res)
	sc.must(err, "ResolveRefund to failed")
	sc.wantEvents("refunds", r.ID, payments.EventRefundPending, payments.EventRefundRequiresReview, payments.EventRefundFailed)

	// Two-step: created awaiting confirmation, expired; another confirmed.
	expiring := claimUnconfirmed(sc, m.ID, "u1")
	confirmed := claimUnconfirmed(sc, m.ID, "u2")
	cref := idemkeys.Ref{MerchantID: m.ID, Endpoint: payments.EndpointConfirmPayment, Key: "c2"}
	_, err = s.ClaimConfirm(ctx, payments.ConfirmClaim{Ref: cref, Fingerprint: idemkeys.Fingerprint("c2"), Token: idemkeys.FirstToken(),
		Lease: time.Minute, PaymentID: confirmed.ID}, confirming("c2", "pm_card_ok"))
	sc.must(err, "ClaimConfirm")
	sc.advance(2 * time.Hour)
	if got, err := s.ExpireUnconfirmed(ctx, 10, payments.Expired); err != nil || len(got) != 1 || got[0].ID != expiring.ID {
		t.Fatalf("ExpireUnconfirmed: %+v, %v", got, err)
	}
	sc.wantEvents("payments", expiring.ID, payments.EventPaymentRequiresConfirmation, payments.EventPaymentCanceled)
	sc.wantEvents("payments", confirmed.ID, payments.EventPaymentRequiresConfirmation, payments.EventPaymentProcessing)

	// Every event in the order its object changed: positions grow with seq.
	for _, id := range []string{p.ID, r.ID, expiring.ID, confirmed.ID} {
		evs := sc.events(id)
		for i := 1; i < len(evs); i++ {
			if evs[i].Pos <= evs[i-1].Pos {
				t.Fatalf("%s: positions out of order: %+v", id, evs)
			}
		}
	}

	// Retention: the purge deletes events past it, on the database's clock.
	total := mysqltest.Count(t, sc.setup, `SELECT COUNT(*) FROM events`)
	sc.advance(30 * 24 * time.Hour)
	if n, _, done, err := s.PurgeEvents(ctx, 31*24*time.Hour, payments.EventPurgeCursor{}, 2); err != nil || n != 0 || !done {
		t.Fatalf("PurgeEvents within retention: %d (done %v), %v", n, done, err)
	}
	if n, _, _, err := s.PurgeEvents(ctx, 30*24*time.Hour, payments.EventPurgeCursor{}, total); err != nil || n != int64(total) {
		t.Fatalf("PurgeEvents: %d of %d, %v", n, total, err)
	}
}

func claimUnconfirmed(sc *scenario, merchantID, key string) payments.Payment {
	sc.t.Helper()
	ref := idemkeys.Ref{MerchantID: merchantID, Endpoint: payments.EndpointCreatePayment, Key: key}
	p := payments.Payment{
		ID: newID("pay"), MerchantID: merchantID, IdempotencyKey: key, MerchantOrderID: newID("ord"),
		Amount: payments.Money{Minor: 1000, Currency: "KRW"}, PSP: "fake", ClientSecret: "secret_should_not_show",
	}
	c := sc.unconfirmed(ref, p, time.Hour, idemkeys.Response{Status: 202, Body: []byte(`{}`)})
	sc.must(sc.s.Claim(sc.ctx, c), "Claim (to confirm later)")
	return c.Payment
}

// A consumer paging GET /events with its cursor never passes an event that
// commits late: transaction A writes its event first and commits last, B
// writes and commits in between; the consumer pages up to B before A
// commits, then on from B's cursor, and finds A there.
func TestEventsPageNeverPassesALateCommit(t *testing.T) {
	sc := newEventScenario(t)
	ctx := sc.ctx
	m, _ := sc.merchant("m")
	l := listings.New(sc.s)
	page := func(after string) []payments.Event {
		t.Helper()
		p, err := l.Events(ctx, listings.EventQuery{MerchantID: m.ID, Limit: 100, StartingAfter: after})
		if err != nil {
			t.Fatal(err)
		}
		return p.Items
	}
	first, _, _ := sc.claim(m.ID, "k1", time.Minute)

	late, err := sc.setup.BeginTxx(ctx, nil) // A: its event written first, committed last
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback()
	lateID := payments.NewEventID()
	if _, err := mysql.InsertEvent(ctx, late, payments.Event{ID: lateID, MerchantID: m.ID, Type: payments.EventPaymentSucceeded,
		ObjectType: payments.ObjectPayment, ObjectID: first.ID, Seq: 2, Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	second, _, _ := sc.claim(m.ID, "k2", time.Minute) // B

	seen := page("")
	if len(seen) != 2 || seen[0].ObjectID != first.ID || seen[1].ObjectID != second.ID {
		t.Fatalf("first page: %+v, want the two committed events", seen)
	}
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	next := page(seen[len(seen)-1].ID)
	if len(next) != 1 || next[0].ID != lateID {
		t.Fatalf("the page after B holds %+v; the event that committed late is passed for good", next)
	}
	if again := page(next[0].ID); len(again) != 0 {
		t.Fatalf("after the late event: %+v", again)
	}
}
