package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"gateway/payments"
)

// The outbox invariant, judged on the database after the run: every change
// of status of every payment and refund has exactly one event, and no event
// tells of a change that did not happen. An object's events, by seq, must
// be numbered 1…n with n its event_seq, start with its creation's status,
// each enter a status other than the one before, carry the object in the
// status their type names, and end in the object's status now; so a
// payment in a final status has exactly one event of that type.

// eventObject is a payment or a refund as the events check reads it.
type eventObject struct {
	MerchantID string `db:"merchant_id"`
	ID         string `db:"id"`
	Status     string `db:"status"`
	EventSeq   int64  `db:"event_seq"`
}

type eventRecord struct {
	MerchantID string `db:"merchant_id"`
	ID         string `db:"id"`
	Type       string `db:"type"`
	ObjectType string `db:"object_type"`
	ObjectID   string `db:"object_id"`
	Seq        int64  `db:"seq"`
	Data       string `db:"data"`
}

// checkEvents is invariant 9.
func (c *checker) checkEvents(ctx context.Context) (*invariant, error) {
	inv := &invariant{ID: 9, Name: "every change of status has exactly one event; no event without its change"}
	var pays, refunds []eventObject
	if err := c.e.db.SelectContext(ctx, &pays, `SELECT merchant_id, id, status, event_seq FROM payments`); err != nil {
		return nil, fmt.Errorf("read payments' event numbers: %w", err)
	}
	if err := c.e.db.SelectContext(ctx, &refunds, `SELECT merchant_id, id, status, event_seq FROM refunds`); err != nil {
		return nil, fmt.Errorf("read refunds' event numbers: %w", err)
	}
	var evs []eventRecord
	if err := c.e.db.SelectContext(ctx, &evs, `SELECT merchant_id, id, type, object_type, object_id, seq, data FROM events ORDER BY pos`); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	byObject := map[string][]eventRecord{}
	for _, ev := range evs {
		byObject[ev.ObjectType+"/"+ev.ObjectID] = append(byObject[ev.ObjectType+"/"+ev.ObjectID], ev)
	}
	first := map[string][]string{
		payments.ObjectPayment: {string(payments.Processing), string(payments.RequiresConfirmation)},
		payments.ObjectRefund:  {string(payments.RefundPending)},
	}
	judge := func(kind string, o eventObject) {
		inv.Checked++
		key := kind + "/" + o.ID
		chain := byObject[key]
		delete(byObject, key)
		if int64(len(chain)) != o.EventSeq {
			inv.fail("%s %s (%s): %d events, its event_seq is %d", kind, o.ID, o.Status, len(chain), o.EventSeq)
			return
		}
		if len(chain) == 0 {
			inv.fail("%s %s (%s) has no event", kind, o.ID, o.Status)
			return
		}
		prev := ""
		for i, ev := range chain {
			var data struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			}
			err := json.Unmarshal([]byte(ev.Data), &data)
			status, ok := strings.CutPrefix(ev.Type, kind+".")
			if t := payments.EventType(ev.Type); t == payments.EventPaymentCaptured || t == payments.EventPaymentPartiallyCaptured {
				status = string(payments.Succeeded) // a capture enters succeeded
			}
			switch {
			case !ok || ev.ObjectType != kind:
				inv.fail("%s %s: event %s is of type %s", kind, o.ID, ev.ID, ev.Type)
			case ev.Seq != int64(i+1):
				inv.fail("%s %s: event %s has seq %d at place %d (a gap or a repeat)", kind, o.ID, ev.ID, ev.Seq, i+1)
			case ev.MerchantID != o.MerchantID:
				inv.fail("%s %s: event %s belongs to merchant %s, the object to %s", kind, o.ID, ev.ID, ev.MerchantID, o.MerchantID)
			case err != nil || data.ID != o.ID || data.Status != status:
				inv.fail("%s %s: event %s (%s) carries %s in %q (%v)", kind, o.ID, ev.ID, ev.Type, data.ID, data.Status, err)
			case i == 0 && !slices.Contains(first[kind], status):
				inv.fail("%s %s: its first event is %s, not its creation", kind, o.ID, ev.Type)
			case status == prev:
				inv.fail("%s %s: events %d and %d both enter %s: a change that did not happen", kind, o.ID, i, i+1, status)
			}
			prev = status
		}
		if prev != o.Status {
			inv.fail("%s %s is %s, its last event says %s", kind, o.ID, o.Status, prev)
		}
	}
	for _, p := range pays {
		judge(payments.ObjectPayment, p)
	}
	for _, r := range refunds {
		judge(payments.ObjectRefund, r)
	}
	for key, chain := range byObject {
		inv.Checked++
		inv.fail("%d events (first %s) of %s, which does not exist", len(chain), chain[0].ID, key)
	}
	inv.Notes = appendCapped(inv.Notes, fmt.Sprintf("%d events of %d payments and %d refunds", len(evs), len(pays), len(refunds)))
	return inv, nil
}
