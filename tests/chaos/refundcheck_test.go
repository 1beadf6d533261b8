package main

import (
	"database/sql"
	"net/http"
	"testing"

	"gateway/payments"
	"gateway/psp/fake/fakeserver"
)

// goodRefunds is a consistent state: payment p1 (1000 KRW) with a refund of
// 300 that succeeded and one of 200 the PSP refused, both answered.
func goodRefunds() *refundEvidence {
	ok1, ok2 := payments.RefundOrderID("m1", "p1", "k1"), payments.RefundOrderID("m1", "p1", "k2")
	told := func(status int, id string, amount int64, order string) answer {
		return answer{Status: status, Body: mustJSON(payments.RefundView{ID: id, PaymentID: "p1", Amount: amount, Currency: "KRW", RefundOrderID: order})}
	}
	return &refundEvidence{
		merchants: []string{"m1", "m2"},
		settled:   true,
		payments: []dbRefundedPayment{
			{MerchantID: "m1", ID: "p1", MerchantOrderID: "ord_1", Status: "succeeded", Amount: 1000, Currency: "KRW", AmountReserved: 300, AmountRefunded: 300},
			{MerchantID: "m2", ID: "p2", MerchantOrderID: "ord_2", Status: "declined", Amount: 500, Currency: "USD"},
		},
		refunds: []dbRefund{
			{MerchantID: "m1", ID: "re_1", PaymentID: "p1", IdemKey: "k1", RefundOrderID: ok1, Status: "succeeded", Amount: 300, Currency: "KRW",
				PSPReference: sql.NullString{String: "fake_re_1", Valid: true}},
			{MerchantID: "m1", ID: "re_2", PaymentID: "p1", IdemKey: "k2", RefundOrderID: ok2, Status: "failed", Amount: 200, Currency: "KRW",
				FailureCode: sql.NullString{String: "amount_exceeds_refundable", Valid: true}},
		},
		keys: []dbRefundKey{
			{MerchantID: "m1", IdemKey: "k1", State: "COMPLETED", RefundID: "re_1"},
			{MerchantID: "m1", IdemKey: "k2", State: "COMPLETED", RefundID: "re_2"},
		},
		ledger: fakeserver.Ledger{
			Charges: []fakeserver.Charge{
				{MerchantOrderID: "ord_1", Reference: "fake_ch_1", Status: "succeeded", Amount: 1000, Currency: "KRW"},
				{MerchantOrderID: "ord_2", Reference: "fake_ch_2", Status: "declined", Amount: 500, Currency: "USD"},
			},
			Refunds: []fakeserver.Refund{
				{RefundOrderID: ok1, MerchantOrderID: "ord_1", Reference: "fake_re_1", Status: "succeeded", Amount: 300, Currency: "KRW"},
			},
		},
		records: []*refundRecord{
			{Merchant: 0, PaymentID: "p1", Key: "k1", Amount: 300, Answers: []answer{told(201, "re_1", 300, ok1), told(201, "re_1", 300, ok1)}},
			{Merchant: 0, PaymentID: "p1", Key: "k2", Amount: 200, Answers: []answer{told(402, "re_2", 200, ok2)},
				Conflicts: []answer{{Status: 422, Type: "idempotency-key-mismatch"}}},
			{Merchant: 0, PaymentID: "p1", Key: "k3", Amount: 900, Refused: []answer{{Status: 422, Type: "refund-exceeds-refundable"}}},
			{Merchant: 1, PaymentID: "p2", Key: "k4", WantRefused: true, Refused: []answer{{Status: 409, Type: "payment-not-refundable"}}},
		},
	}
}

// Each refund invariant fails on a state that breaks it.
func TestRefundInvariantsCatchBadStates(t *testing.T) {
	invs := newRefundInvariants()
	checkRefundState(goodRefunds(), invs)
	for _, inv := range invs {
		if inv.Violations > 0 {
			t.Fatalf("a consistent state violates %d. %s: %v", inv.ID, inv.Name, inv.Examples)
		}
	}
	if invs[riOnce].Checked == 0 || invs[riReserved].Checked == 0 || invs[riAnswers].Checked == 0 {
		t.Fatalf("nothing checked: %+v %+v %+v", invs[riOnce], invs[riReserved], invs[riAnswers])
	}

	tests := []struct {
		name  string
		want  int // index of the invariant that must fail
		spoil func(ev *refundEvidence)
	}{
		{"a refund order id refunded twice at the PSP", riOnce, func(ev *refundEvidence) {
			dup := ev.ledger.Refunds[0]
			dup.Reference = "fake_re_9"
			ev.ledger.Refunds = append(ev.ledger.Refunds, dup)
		}},
		{"a refund order id not derived from its key", riOnce, func(ev *refundEvidence) {
			ev.refunds[1].RefundOrderID = "rfd_000000000000000000000000"
		}},
		{"the PSP refunded more than the charge", riWithinCharge, func(ev *refundEvidence) {
			ev.ledger.Refunds = append(ev.ledger.Refunds, fakeserver.Refund{RefundOrderID: "rfd_x", MerchantOrderID: "ord_1", Reference: "fake_re_2", Status: "succeeded", Amount: 701, Currency: "KRW"})
		}},
		{"the PSP refunded a declined charge", riWithinCharge, func(ev *refundEvidence) {
			ev.ledger.Refunds = append(ev.ledger.Refunds, fakeserver.Refund{RefundOrderID: "rfd_y", MerchantOrderID: "ord_2", Reference: "fake_re_3", Status: "succeeded", Amount: 1, Currency: "USD"})
		}},
		{"a PSP refund without a row", riLedgerRows, func(ev *refundEvidence) {
			ev.ledger.Refunds = append(ev.ledger.Refunds, fakeserver.Refund{RefundOrderID: "rfd_z", MerchantOrderID: "ord_1", Reference: "fake_re_4", Status: "succeeded", Amount: 10, Currency: "KRW"})
		}},
		{"a row of another amount than the PSP's refund", riLedgerRows, func(ev *refundEvidence) {
			ev.ledger.Refunds[0].Amount = 299
		}},
		{"a failed row the PSP refunded", riLedgerRows, func(ev *refundEvidence) {
			ev.ledger.Refunds = append(ev.ledger.Refunds, fakeserver.Refund{RefundOrderID: ev.refunds[1].RefundOrderID, MerchantOrderID: "ord_1", Reference: "fake_re_5", Status: "succeeded", Amount: 200, Currency: "KRW"})
		}},
		{"a succeeded row the PSP never refunded", riRowsLedger, func(ev *refundEvidence) {
			ev.ledger.Refunds = nil
		}},
		{"a succeeded row with another PSP reference", riRowsLedger, func(ev *refundEvidence) {
			ev.refunds[0].PSPReference.String = "fake_re_8"
		}},
		{"refunds holding more than the payment", riReserved, func(ev *refundEvidence) {
			ev.refunds = append(ev.refunds, dbRefund{MerchantID: "m1", ID: "re_3", PaymentID: "p1", IdemKey: "k3", RefundOrderID: payments.RefundOrderID("m1", "p1", "k3"),
				Status: "requires_review", Amount: 701, Currency: "KRW"})
			ev.keys = append(ev.keys, dbRefundKey{MerchantID: "m1", IdemKey: "k3", State: "COMPLETED", RefundID: "re_3"})
			ev.payments[0].AmountReserved = 1001
		}},
		{"amount_reserved not its refunds' sum", riReserved, func(ev *refundEvidence) {
			ev.payments[0].AmountReserved = 500 // the failed refund's share never given back
		}},
		{"amount_refunded not its refunds' sum", riReserved, func(ev *refundEvidence) {
			ev.payments[0].AmountRefunded = 0
		}},
		{"a refund of a declined payment", riReserved, func(ev *refundEvidence) {
			ev.refunds[0].PaymentID, ev.refunds[0].MerchantID = "p2", "m2"
		}},
		{"a refund still pending", riSettled, func(ev *refundEvidence) {
			ev.refunds[1].Status = "pending"
			ev.payments[0].AmountReserved = 500
		}},
		{"a refund key still in progress", riSettled, func(ev *refundEvidence) {
			ev.keys[1].State = "IN_PROGRESS"
		}},
		{"the drain ran out of time", riSettled, func(ev *refundEvidence) {
			ev.settled, ev.inProgressLeft = false, 1
		}},
		{"a refused key left a refund behind", riAnswers, func(ev *refundEvidence) {
			ev.records[0].Answers = nil
			ev.records[0].Refused = []answer{{Status: 409, Type: "payment-not-refundable"}}
		}},
		{"an answer naming another refund", riAnswers, func(ev *refundEvidence) {
			ev.records[0].Answers[0].Body = ev.records[1].Answers[0].Body
		}},
		{"a declined payment's refund answered", riAnswers, func(ev *refundEvidence) {
			ev.records[3].Refused[0] = answer{Status: 422, Type: "refund-exceeds-refundable"}
		}},
		{"a conflicting body accepted", riAnswers, func(ev *refundEvidence) {
			ev.records[1].Conflicts[0] = answer{Status: http.StatusPaymentRequired}
		}},
		{"a refund nobody asked for", riAnswers, func(ev *refundEvidence) {
			ev.records = ev.records[1:]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := goodRefunds()
			tt.spoil(ev)
			invs := newRefundInvariants()
			checkRefundState(ev, invs)
			if inv := invs[tt.want]; inv.Violations == 0 {
				t.Fatalf("%d. %s holds on a bad state", inv.ID, inv.Name)
			} else {
				t.Logf("%d. %s: %v", inv.ID, inv.Name, inv.Examples)
			}
		})
	}
}
