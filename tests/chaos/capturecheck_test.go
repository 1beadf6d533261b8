package main

import (
	"database/sql"
	"net/http"
	"testing"

	"gateway/payments"
	"gateway/psp/fake/fakeserver"
)

func some(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

func int64p(n int64) *int64 { return &n }

func stored(status int, body []byte) (sql.NullInt32, []byte) {
	return sql.NullInt32{Int32: int32(status), Valid: true}, body
}

// goodCaptures is a consistent state of merchant m1 (and m2): p1, an
// authorization of 1000 KRW captured in part (400), 100 of it refunded, a
// second capture refused; p2 voided; p3 (m2's) lapsed, and m1's capture of
// it refused 404; p4 paid under key k4 and canceled by key, so refunded in
// full; key k5 canceled before any request, and its late duplicate
// answered with the cancellation.
func goodCaptures() *captureEvidence {
	cap1 := payments.OperationOrderID(payments.OpCapture, "m1", "p1", "c1")
	vod1 := payments.OperationOrderID(payments.OpVoid, "m1", "p2", "v1")
	ord4 := payments.MerchantOrderID("m1", "k4")
	p1 := payments.View{ID: "p1", Status: payments.Succeeded, Amount: 1000, Currency: "KRW", CaptureMethod: payments.CaptureManual, AmountCaptured: int64p(400)}
	p2 := payments.View{ID: "p2", Status: payments.Canceled, Amount: 1000, Currency: "KRW", CaptureMethod: payments.CaptureManual, AmountCaptured: int64p(0)}
	cancel4 := mustJSON(payments.CancellationView{Object: "cancellation", IdempotencyKey: "k4", Status: payments.CancellationRefunded})
	cancel5 := mustJSON(payments.CancellationView{Object: "cancellation", IdempotencyKey: "k5", Status: payments.CancellationCanceled})
	key := func(endpoint, key, subject string, status int, body []byte) dbCommandKey {
		k := dbCommandKey{MerchantID: "m1", Endpoint: endpoint, IdemKey: key, State: "COMPLETED", SubjectID: subject}
		k.ResponseStatus, k.ResponseBody = stored(status, body)
		return k
	}
	tombstone := func(canceled string, answer []byte) dbCommandKey {
		k := key(payments.EndpointCreatePayment, canceled, "", http.StatusOK, answer)
		k.Fingerprint = payments.CanceledByKey[:]
		return k
	}
	return &captureEvidence{
		merchants: []string{"m1", "m2"},
		settled:   true,
		payments: []dbCapturePayment{
			{MerchantID: "m1", ID: "p1", IdemKey: "k1", MerchantOrderID: "ord_1", Status: "succeeded", CaptureMethod: "manual", Amount: 1000, Currency: "KRW",
				AmountCaptured: 400, AmountReserved: 100, AmountRefunded: 100},
			{MerchantID: "m1", ID: "p2", IdemKey: "k2", MerchantOrderID: "ord_2", Status: "canceled", CaptureMethod: "manual", Amount: 1000, Currency: "KRW",
				CancellationReason: some("duplicate")},
			{MerchantID: "m2", ID: "p3", IdemKey: "k3", MerchantOrderID: "ord_3", Status: "canceled", CaptureMethod: "manual", Amount: 700, Currency: "USD",
				CancellationReason: some("authorization_expired")},
			{MerchantID: "m1", ID: "p4", IdemKey: "k4", MerchantOrderID: ord4, Status: "succeeded", CaptureMethod: "automatic", Amount: 500, Currency: "USD",
				AmountReserved: 500, AmountRefunded: 500},
		},
		keys: []dbCommandKey{
			key(payments.EndpointCapturePayment, "c1", "p1", http.StatusCreated, mustJSON(p1)),
			key(payments.EndpointCancelPayment, "v1", "p2", http.StatusOK, mustJSON(p2)),
			key(payments.EndpointCreatePayment, "k4", "p4", http.StatusCreated, []byte(`{}`)),
			key(payments.EndpointCancelByKey, "ck4", "p4", http.StatusOK, cancel4),
			tombstone("k5", cancel5),
			key(payments.EndpointCancelByKey, "ck5", "", http.StatusOK, cancel5),
		},
		cancellations: []dbCancellation{
			{MerchantID: "m1", Key: "k4", CancelKey: "ck4", Status: "refunded", PaymentID: some("p4"), RefundID: some("re_4")},
			{MerchantID: "m1", Key: "k5", CancelKey: "ck5", Status: "canceled"},
		},
		refunds: []dbRefund{
			{MerchantID: "m1", ID: "re_1", PaymentID: "p1", IdemKey: "r1", Status: "succeeded", Amount: 100, Currency: "KRW"},
			{MerchantID: "m1", ID: "re_4", PaymentID: "p4", IdemKey: "cbk_4", Status: "succeeded", Amount: 500, Currency: "USD"},
		},
		events: []dbPaymentEvent{
			{MerchantID: "m1", ObjectID: "p1", Type: string(payments.EventPaymentPartiallyCaptured)},
			{MerchantID: "m1", ObjectID: "p2", Type: string(payments.EventPaymentCanceled)},
			{MerchantID: "m2", ObjectID: "p3", Type: string(payments.EventPaymentCanceled)},
		},
		ledger: fakeserver.Ledger{
			Charges: []fakeserver.Charge{
				{MerchantOrderID: "ord_1", Reference: "ch_1", Status: "succeeded", Amount: 1000, Currency: "KRW", AmountCaptured: 400},
				{MerchantOrderID: "ord_2", Reference: "ch_2", Status: "voided", Amount: 1000, Currency: "KRW"},
				{MerchantOrderID: "ord_3", Reference: "ch_3", Status: "voided", Amount: 700, Currency: "USD"},
				{MerchantOrderID: ord4, Reference: "ch_4", Status: "succeeded", Amount: 500, Currency: "USD", AmountCaptured: 500},
			},
			Authorizations: []fakeserver.Authorization{
				{MerchantOrderID: "ord_1", Reference: "ch_1", Status: "succeeded", Amount: 1000, AmountCaptured: 400, Currency: "KRW"},
				{MerchantOrderID: "ord_2", Reference: "ch_2", Status: "voided", Amount: 1000, Currency: "KRW"},
				{MerchantOrderID: "ord_3", Reference: "ch_3", Status: "voided", Amount: 700, Currency: "USD", Lapsed: true},
			},
			Captures: []fakeserver.Capture{{CaptureOrderID: cap1, MerchantOrderID: "ord_1", ChargeReference: "ch_1", Reference: "cp_1", Amount: 400, Currency: "KRW"}},
			Voids:    []fakeserver.Void{{VoidOrderID: vod1, MerchantOrderID: "ord_2", ChargeReference: "ch_2", Reason: "duplicate"}},
			Refunds: []fakeserver.Refund{
				{RefundOrderID: "rfd_1", MerchantOrderID: "ord_1", Reference: "re_1", Status: "succeeded", Amount: 100, Currency: "KRW"},
				{RefundOrderID: "rfd_4", MerchantOrderID: ord4, Reference: "re_4", Status: "succeeded", Amount: 500, Currency: "USD"},
			},
		},
		ops: []*opRecord{
			{Merchant: 0, Sender: 0, PaymentID: "p1", Kind: payments.OpCapture, Key: "c1", Amount: 400,
				Answers: []answer{{Status: 201, Body: mustJSON(p1)}, {Status: 201, Body: mustJSON(p1)}}},
			{Merchant: 0, Sender: 0, PaymentID: "p1", Kind: payments.OpCapture, Key: "c2", MustRefuse: []string{problemNotCapturable},
				Refused: []answer{{Status: 409, Type: problemNotCapturable}}},
			{Merchant: 0, Sender: 0, PaymentID: "p2", Kind: payments.OpVoid, Key: "v1", Reason: "duplicate",
				Answers: []answer{{Status: 200, Body: mustJSON(p2)}}, Conflicts: []answer{{Status: 422, Type: "idempotency-key-mismatch"}}},
			{Merchant: 1, Sender: 0, PaymentID: "p3", Kind: payments.OpCapture, Key: "f1", MustRefuse: []string{problemNotFound},
				Refused: []answer{{Status: 404, Type: problemNotFound}}},
		},
		cancels: []*cancelRecord{
			{Merchant: 0, Key: "k4", OwnKey: "ck4", When: "after", Answers: []answer{{Status: 200, Body: cancel4}}},
			{Merchant: 0, Key: "k5", OwnKey: "ck5", When: "before", Answers: []answer{{Status: 200, Body: cancel5}}},
			{Merchant: 0, Key: "k5", OwnKey: "ck6", When: "before", Second: true, Refused: []answer{{Status: 409, Type: problemConflict}}},
		},
		records: []*keyRecord{
			{Merchant: 0, Key: "k4", CancelByKey: true, Answers: []answer{{Status: 201}}},
			{Merchant: 0, Key: "k5", CancelByKey: true, Canceled: []answer{{Status: 409, Type: "canceled-by-key"}}},
		},
	}
}

// Each capture and cancel-by-key invariant fails on a state that breaks it.
func TestCaptureInvariantsCatchBadStates(t *testing.T) {
	invs := newCaptureInvariants()
	checkCaptureState(goodCaptures(), invs)
	for _, inv := range invs {
		if inv.Violations > 0 {
			t.Fatalf("a consistent state violates %d. %s: %v", inv.ID, inv.Name, inv.Examples)
		}
		if inv.Checked == 0 {
			t.Fatalf("%d. %s checked nothing", inv.ID, inv.Name)
		}
	}

	voidOfP1 := func(ev *captureEvidence) {
		k := dbCommandKey{MerchantID: "m1", Endpoint: payments.EndpointCancelPayment, IdemKey: "v9", State: "COMPLETED", SubjectID: "p1"}
		k.ResponseStatus, k.ResponseBody = stored(http.StatusOK, []byte(`{}`))
		ev.keys = append(ev.keys, k)
		ev.ops = append(ev.ops, &opRecord{Merchant: 0, Sender: 0, PaymentID: "p1", Kind: payments.OpVoid, Key: "v9", Answers: []answer{{Status: 200, Body: mustJSON(payments.View{ID: "p1"})}}})
	}
	tests := []struct {
		name  string
		want  int // index of the invariant that must fail
		spoil func(ev *captureEvidence)
	}{
		{"an authorization captured twice at the PSP", ciOnce, func(ev *captureEvidence) {
			ev.ledger.Captures = append(ev.ledger.Captures, fakeserver.Capture{CaptureOrderID: payments.OperationOrderID(payments.OpCapture, "m1", "p1", "c2"),
				MerchantOrderID: "ord_1", Reference: "cp_2", Amount: 400, Currency: "KRW"})
		}},
		{"a capture order id captured twice", ciOnce, func(ev *captureEvidence) {
			dup := ev.ledger.Captures[0]
			dup.Reference = "cp_9"
			ev.ledger.Captures = append(ev.ledger.Captures, dup)
		}},
		{"a capture under an order id no key derives", ciOnce, func(ev *captureEvidence) {
			ev.ledger.Captures[0].CaptureOrderID = "cap_000000000000000000000000"
		}},
		{"two capture keys answering captured", ciOnce, func(ev *captureEvidence) {
			k := ev.keys[0]
			k.IdemKey = "c2"
			ev.keys = append(ev.keys, k)
		}},
		{"two clients told captured with different keys", ciOnce, func(ev *captureEvidence) {
			ev.ops[1].MustRefuse, ev.ops[1].Refused, ev.ops[1].Answers = nil, nil, ev.ops[0].Answers[:1]
		}},
		{"a capture answered but never made", ciOnce, func(ev *captureEvidence) {
			ev.ledger.Captures = nil
		}},
		{"amount_captured not the PSP's", ciWithinAuthorized, func(ev *captureEvidence) {
			ev.payments[0].AmountCaptured = 500
		}},
		{"captured more than authorized", ciWithinAuthorized, func(ev *captureEvidence) {
			ev.ledger.Authorizations[0].AmountCaptured = 1001
		}},
		{"the PSP captured a canceled payment", ciWithinAuthorized, func(ev *captureEvidence) {
			ev.ledger.Authorizations[1].Status, ev.ledger.Authorizations[1].AmountCaptured = "succeeded", 1000
		}},
		{"a released authorization whose payment is succeeded", ciWithinAuthorized, func(ev *captureEvidence) {
			ev.ledger.Authorizations[0].Status = "voided"
			ev.ledger.Authorizations[0].Lapsed = true
		}},
		{"an authorization of an automatic payment", ciWithinAuthorized, func(ev *captureEvidence) {
			ev.payments[0].CaptureMethod = "automatic"
		}},
		{"a client told another captured amount", ciWithinAuthorized, func(ev *captureEvidence) {
			ev.ops[0].Amount = 300
		}},
		{"a payment captured and voided", ciExclusive, voidOfP1},
		{"a capture event and a canceled event", ciExclusive, func(ev *captureEvidence) {
			ev.events = append(ev.events, dbPaymentEvent{MerchantID: "m1", ObjectID: "p1", Type: string(payments.EventPaymentCanceled)})
		}},
		{"an authorization captured and voided at the PSP", ciExclusive, func(ev *captureEvidence) {
			ev.ledger.Voids = append(ev.ledger.Voids, fakeserver.Void{VoidOrderID: "vod_x", MerchantOrderID: "ord_1"})
		}},
		{"a void answered after the capture", ciExclusive, func(ev *captureEvidence) {
			ev.ops[1].Kind, ev.ops[1].MustRefuse = payments.OpVoid, []string{problemNotCancelable}
			ev.ops[1].Refused, ev.ops[1].Answers = nil, []answer{{Status: 200, Body: mustJSON(payments.View{ID: "p1"})}}
		}},
		{"a capture refused for another reason than it must be", ciExclusive, func(ev *captureEvidence) {
			ev.ops[1].Refused[0].Type = problemExpired
		}},
		{"the PSP refunded more than was captured", ciRefunds, func(ev *captureEvidence) {
			ev.ledger.Refunds = append(ev.ledger.Refunds, fakeserver.Refund{RefundOrderID: "rfd_2", MerchantOrderID: "ord_1", Reference: "re_2", Status: "succeeded", Amount: 301, Currency: "KRW"})
		}},
		{"refunds holding more than was captured", ciRefunds, func(ev *captureEvidence) {
			ev.payments[0].AmountReserved = 401
		}},
		{"a refund of a voided authorization", ciRefunds, func(ev *captureEvidence) {
			ev.payments[1].AmountRefunded, ev.payments[1].AmountReserved = 1, 1
		}},
		{"the gateway asked the PSP for more than was captured", ciRefunds, func(ev *captureEvidence) {
			ev.refunds = append(ev.refunds, dbRefund{MerchantID: "m1", ID: "re_2", PaymentID: "p1", IdemKey: "r2", Status: "failed", Amount: 900, Currency: "KRW",
				FailureCode: some("amount_exceeds_refundable")})
		}},
		{"an authorization left open", ciEnded, func(ev *captureEvidence) {
			ev.payments[2].Status, ev.payments[2].CancellationReason = "requires_capture", sql.NullString{}
			ev.ledger.Authorizations[2].Status, ev.ledger.Authorizations[2].Lapsed = "authorized", false
		}},
		{"an operation left in flight", ciEnded, func(ev *captureEvidence) {
			ev.payments[0].OpKind, ev.payments[0].OpKey = some("capture"), some("c2")
		}},
		{"a capture key left in progress", ciEnded, func(ev *captureEvidence) {
			ev.keys[0].State = "IN_PROGRESS"
		}},
		{"the drain ran out of time", ciEnded, func(ev *captureEvidence) {
			ev.settled, ev.left = false, "1 authorizations open"
		}},
		{"two answers to one capture key", ciAnswers, func(ev *captureEvidence) {
			ev.ops[0].Answers[1] = answer{Status: 402, Body: mustJSON(payments.View{ID: "p1"})}
		}},
		{"a refused capture stored its key", ciAnswers, func(ev *captureEvidence) {
			k := ev.keys[0]
			k.IdemKey, k.ResponseStatus = "c2", sql.NullInt32{}
			ev.keys = append(ev.keys, k)
		}},
		{"another merchant's capture answered", ciAnswers, func(ev *captureEvidence) {
			ev.ops[3].Refused = []answer{{Status: 409, Type: problemNotCapturable}}
		}},
		{"an answered capture not stored", ciAnswers, func(ev *captureEvidence) {
			ev.ops[0].Key = "c0"
		}},
		{"a capture key nobody asked for", ciAnswers, func(ev *captureEvidence) {
			ev.ops = ev.ops[1:]
		}},
		{"a conflicting body accepted", ciAnswers, func(ev *captureEvidence) {
			ev.ops[2].Conflicts[0] = answer{Status: 200}
		}},
		{"a 500 to a correct capture", ciAnswers, func(ev *captureEvidence) {
			ev.ops[0].Unexpected = []answer{{Status: 500, Type: "internal"}}
		}},
		{"a canceled key whose money was kept", ciCancelByKey, func(ev *captureEvidence) {
			ev.ledger.Refunds = ev.ledger.Refunds[:1]
		}},
		{"a canceled key whose authorization is still held", ciCancelByKey, func(ev *captureEvidence) {
			ev.ledger.Charges[3].Status = "authorized"
		}},
		{"a late duplicate charged after the cancellation", ciCancelByKey, func(ev *captureEvidence) {
			ord := payments.MerchantOrderID("m1", "k5")
			ev.payments = append(ev.payments, dbCapturePayment{MerchantID: "m1", ID: "p5", IdemKey: "k5", MerchantOrderID: ord, Status: "succeeded",
				CaptureMethod: "automatic", Amount: 100, Currency: "KRW"})
			ev.ledger.Charges = append(ev.ledger.Charges, fakeserver.Charge{MerchantOrderID: ord, Reference: "ch_5", Status: "succeeded", Amount: 100, Currency: "KRW"})
		}},
		{"a cancellation left requested", ciCancelByKey, func(ev *captureEvidence) {
			ev.cancellations[0].Status = "cancel_requested"
		}},
		{"a canceled key without its tombstone", ciCancelByKey, func(ev *captureEvidence) {
			ev.keys[4].Fingerprint = []byte("another request")
		}},
		{"a canceled-by-key answer for a key with a payment", ciCancelByKey, func(ev *captureEvidence) {
			ev.records[0].Canceled = []answer{{Status: 409, Type: "canceled-by-key"}}
		}},
		{"a cancellation told what its row does not say", ciCancelByKey, func(ev *captureEvidence) {
			ev.cancellations[0].Status = "voided"
		}},
		{"a second cancellation answered as the first", ciCancelByKey, func(ev *captureEvidence) {
			ev.cancels[2].Refused, ev.cancels[2].Answers = nil, ev.cancels[1].Answers
		}},
		{"a cancellation nobody asked for", ciCancelByKey, func(ev *captureEvidence) {
			ev.cancels = ev.cancels[1:]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := goodCaptures()
			tt.spoil(ev)
			invs := newCaptureInvariants()
			checkCaptureState(ev, invs)
			if inv := invs[tt.want]; inv.Violations == 0 {
				t.Fatalf("%d. %s holds on a bad state", inv.ID, inv.Name)
			} else {
				t.Logf("%d. %s: %v", inv.ID, inv.Name, inv.Examples)
			}
		})
	}
}

// A refund a cancellation by key made is no refund nobody asked for; any
// other refund with a key no client sent is.
func TestRefundOfACancellationIsKnown(t *testing.T) {
	ev := goodRefunds()
	ev.refunds = append(ev.refunds, dbRefund{MerchantID: "m1", ID: "re_9", PaymentID: "p1", IdemKey: "cbk_9", RefundOrderID: payments.RefundOrderID("m1", "p1", "cbk_9"),
		Status: "failed", Amount: 1, Currency: "KRW", FailureCode: some("not_processed")})
	ev.keys = append(ev.keys, dbRefundKey{MerchantID: "m1", IdemKey: "cbk_9", State: "COMPLETED", RefundID: "re_9"})
	for _, canceled := range []bool{true, false} {
		ev.canceled = map[payRef]bool{{"m1", "p1"}: canceled}
		invs := newRefundInvariants()
		checkRefundState(ev, invs)
		if got := invs[riAnswers].Violations > 0; got == canceled {
			t.Errorf("payment canceled by key %v: invariant %d violated %v: %v", canceled, invs[riAnswers].ID, got, invs[riAnswers].Examples)
		}
	}
}
