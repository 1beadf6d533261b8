package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"gateway/api"
	"gateway/mysql"
	"gateway/notices"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/psp/stripe"
	"gateway/psp/stripe/stripetest"
	"gateway/psp/toss"
	"gateway/psp/toss/tosstest"
	"gateway/reconcile"
)

// The PSPs' notifications through the API, against fakes that speak
// Stripe's and Toss's documented shapes.

const (
	stripeKey    = "sk_test_51GatewayWebhookTests"
	stripeWhsec  = "whsec_gateway_tests"
	tossKey      = "test_sk_gatewayWebhookTests"
	tossClient   = "test_ck_gatewayWebhookTests"
	stripePublic = "pk_test_gatewayWebhookTests"
)

// stripeEnv is a gateway charging through the Stripe adapter against a
// fake Stripe, taking Stripe's notifications. With payPSP set, payments go
// to that adapter instead, and Stripe only notifies.
type stripeEnv struct {
	*env
	stripe  *stripetest.Server
	adapter *stripe.Adapter
}

func newStripeEnv(t *testing.T, payPSP psp.Adapter) *stripeEnv {
	t.Helper()
	fake := stripetest.New(stripeKey)
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	a, err := stripe.New(stripe.Config{SecretKey: stripeKey, BaseURL: ts.URL, PublishableKey: stripePublic, WebhookSecret: stripeWhsec})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(s *envSetup) {
		s.adapter = a
		if payPSP != nil {
			s.adapter = payPSP
		}
		s.notices = func(st *mysql.Store) api.NoticeReceiver {
			return notices.New(st, map[string]notices.Source{"stripe": {PSP: "stripe", Reader: a}}, notices.Config{})
		}
	})
	return &stripeEnv{env: e, stripe: fake, adapter: a}
}

// notify posts a notification to path as the PSP would.
func (e *env) notify(path string, header http.Header, body []byte) response {
	e.t.Helper()
	hdr := map[string]string{"Content-Type": "application/json; charset=utf-8"}
	for k := range header {
		hdr[k] = header.Get(k)
	}
	res, err := e.do(context.Background(), http.MethodPost, path, "", hdr, string(body))
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	return res
}

// event posts Stripe's event typ about the object id, signed now.
func (e *stripeEnv) event(typ, id string) response {
	e.t.Helper()
	return e.signed(e.stripe.Event(typ, id))
}

func (e *stripeEnv) signed(body []byte) response {
	e.t.Helper()
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeWhsec})
	return e.notify("/psp/stripe/webhook", http.Header{"Stripe-Signature": {p.Header}}, body)
}

func wantReceived(t *testing.T, res response) {
	t.Helper()
	wantStatus(t, res, http.StatusOK)
	if got := decodeJSON[map[string]bool](t, res.body); !got["received"] {
		t.Fatalf("answer %s", res.body)
	}
}

const usdLater = `{"amount": 1500, "currency": "USD", "confirm": false}`

// A card that needs 3-D Secure: the confirm answers requires_action with
// what Stripe.js needs; Stripe's notification, once the customer passed
// the check, settles the payment, with an audit row, and the confirm's key
// replays the outcome. The same notification again, or a late one whose
// snapshot still waits for the customer, changes nothing.
func TestStripeNotificationSettlesRequiresAction(t *testing.T) {
	e := newStripeEnv(t, nil)
	v := e.createLater("k", usdLater)
	if c := v.Checkout; c.PSP != "stripe" || c.Client != psp.ClientStripeJS || c.PublishableKey != stripePublic || c.Amount != 1500 ||
		c.Currency != "USD" || c.ConfirmWith != "payment_method" {
		t.Fatalf("checkout %+v", c)
	}
	res := e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`)
	wantStatus(t, res, http.StatusAccepted)
	got := decodeView(t, res.body)
	if got.Status != payments.RequiresAction || got.NextAction == nil || got.NextAction.Type != "use_stripe_sdk" || got.NextAction.ClientSecret == "" {
		t.Fatalf("confirm answered %s", res.body)
	}
	pi := e.stripe.PaymentIntent(v.MerchantOrderID)
	stale := e.stripe.Event("payment_intent.requires_action", pi)
	e.stripe.Authenticate(v.MerchantOrderID, true)

	wantReceived(t, e.event("payment_intent.succeeded", pi))
	if now := decodeView(t, e.get("/payments/"+v.ID).body); now.Status != payments.Succeeded || now.NextAction != nil || now.PSPReference == nil || *now.PSPReference != pi {
		t.Fatalf("after the notification: %+v", now)
	}
	replay := e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`)
	wantStatus(t, replay, http.StatusCreated)
	if replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the settled confirm is not a replay")
	}
	audit := `SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ? AND actor = 'psp notification' AND to_status = 'succeeded'`
	if n := e.count(audit, v.ID); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
	wantReceived(t, e.event("payment_intent.succeeded", pi)) // twice
	wantReceived(t, e.signed(stale))                         // out of order
	if n := e.count(audit, v.ID); n != 1 {
		t.Fatalf("%d audit rows after the repeats", n)
	}
	if again := e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`); !bytes.Equal(again.body, replay.body) {
		t.Fatalf("the answer changed:\n%s\n%s", replay.body, again.body)
	}
	if n := e.stripe.Charges(v.MerchantOrderID); n != 1 {
		t.Fatalf("%d payment intents", n)
	}
}

// A failed 3-D Secure check settles the payment declined.
func TestStripeNotificationDeclinesRequiresAction(t *testing.T) {
	e := newStripeEnv(t, nil)
	v := e.createLater("k", usdLater)
	wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`), http.StatusAccepted)
	pi := e.stripe.PaymentIntent(v.MerchantOrderID)
	e.stripe.Authenticate(v.MerchantOrderID, false)
	wantReceived(t, e.event("payment_intent.payment_failed", pi))
	replay := e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`)
	wantStatus(t, replay, http.StatusPaymentRequired)
	if got := decodeView(t, replay.body); got.Status != payments.Declined || got.DeclineCode == nil {
		t.Fatalf("replay %s", replay.body)
	}
}

// Stripe's two-step flow after a failed 3-D Secure check: the
// PaymentIntent is back in requires_payment_method, payable still by the
// browser holding its client secret. The gateway records the decline only
// after canceling it at Stripe, so the browser's second try with another
// card fails. A PSP that charges it anyway and says so contradicts the
// gateway's final answer: the payment goes to requires_review with an
// event and the PSP's evidence in its audit row, the key replays that, and
// the review queue settles it from the PSP's word, the key following.
func TestStripeNotificationContradictingADeclineIsReviewed(t *testing.T) {
	e := newStripeEnv(t, nil)
	v := e.createLater("k", usdLater)
	wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`), http.StatusAccepted)
	pi := e.stripe.PaymentIntent(v.MerchantOrderID)
	e.stripe.Authenticate(v.MerchantOrderID, false)
	wantReceived(t, e.event("payment_intent.payment_failed", pi))
	wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`), http.StatusPaymentRequired)
	if e.stripe.PayAgain(v.MerchantOrderID) {
		t.Fatal("the browser could pay the PaymentIntent the gateway answered declined")
	}

	e.stripe.Contradict(v.MerchantOrderID)
	wantReceived(t, e.event("payment_intent.succeeded", pi))
	now := decodeView(t, e.get("/payments/"+v.ID).body)
	if now.Status != payments.RequiresReview {
		t.Fatalf("after the PSP contradicted the decline: %s, want requires_review", now.Status)
	}
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ? AND actor = 'psp notification'
AND from_status = 'declined' AND to_status = 'requires_review' AND psp_reference = ? AND reason LIKE '%succeeded%'`, v.ID, pi); n != 1 {
		t.Fatalf("%d audit rows with the PSP's evidence", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ? AND type = 'payment.requires_review'`, v.ID); n != 1 {
		t.Fatalf("%d payment.requires_review events", n)
	}
	replay := e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`)
	if replay.status != http.StatusAccepted || decodeView(t, replay.body).Status != payments.RequiresReview {
		t.Fatalf("the confirm's key replays %d %s, want the payment in review", replay.status, replay.body)
	}
	wantReceived(t, e.event("payment_intent.succeeded", pi)) // again: nothing more
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ? AND to_status = 'requires_review'`, v.ID); n != 1 {
		t.Fatalf("a repeated notification wrote %d review decisions", n)
	}

	e.advance(payments.ReviewFirstLook + time.Second)
	e.pass(e.reconciler(e.adapter))
	settled := e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`)
	if settled.status != http.StatusCreated || decodeView(t, settled.body).Status != payments.Succeeded {
		t.Fatalf("after the review queue's look: %d %s, want 201 succeeded", settled.status, settled.body)
	}
}

// A notification that does not verify changes nothing and is refused; one
// for an order the gateway does not know is acknowledged and changes nothing.
func TestStripeNotificationRefusedOrUnknown(t *testing.T) {
	e := newStripeEnv(t, nil)
	v := e.createLater("k", usdLater)
	wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`), http.StatusAccepted)
	pi := e.stripe.PaymentIntent(v.MerchantOrderID)
	e.stripe.Authenticate(v.MerchantOrderID, true)
	body := e.stripe.Event("payment_intent.succeeded", pi)
	forged := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_guessed"})
	old := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeWhsec, Timestamp: time.Now().Add(-time.Hour)})
	for _, h := range []http.Header{
		{},                                    // no signature
		{"Stripe-Signature": {forged.Header}}, // another secret
		{"Stripe-Signature": {old.Header}},    // an old request replayed
	} {
		wantProblem(t, e.notify("/psp/stripe/webhook", h, body), http.StatusBadRequest, "notice-rejected")
	}
	if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.RequiresAction {
		t.Fatalf("a refused notification settled the payment: %s", got.Status)
	}
	// A PaymentIntent for an order id the gateway never made.
	c, err := e.adapter.Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000fff", Amount: 700, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	wantReceived(t, e.event("payment_intent.succeeded", c.Reference))
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions`); n != 0 {
		t.Fatalf("%d decisions recorded", n)
	}
	// Toss is not configured here.
	wantProblem(t, e.notify("/psp/toss/webhook", nil, []byte(`{"orderId":"`+v.MerchantOrderID+`"}`)), http.StatusNotFound, "not-found")
}

// A notification never settles a payment another PSP holds, whatever its
// order id: asking another PSP would turn "not theirs" into an outcome.
func TestNotificationForAnotherPSPsPayment(t *testing.T) {
	e := newStripeEnv(t, fake.New())
	v := e.createLater("k", laterBody)
	wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_3ds"}`), http.StatusAccepted)
	c, err := e.adapter.Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: v.MerchantOrderID, Amount: 1000, Currency: "KRW", PaymentMethod: "pm_card_visa"})
	if err != nil || c.Status != psp.Succeeded {
		t.Fatalf("stripe charge %+v %v", c, err)
	}
	wantReceived(t, e.event("payment_intent.succeeded", c.Reference))
	if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.RequiresAction {
		t.Fatalf("Stripe's notification settled the fake PSP's payment: %s", got.Status)
	}
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions`); n != 0 {
		t.Fatalf("%d decisions recorded", n)
	}
}

// A payment whose key is unfinished (its answer lost) is not settled by the
// notification, which would fight the key's holder: the reconciler's next
// look at the key becomes due now, and the reconciler settles it.
func TestStripeNotificationHastensAnUnfinishedKey(t *testing.T) {
	e := newStripeEnv(t, nil)
	e.stripe.FailNextCreate() // Stripe charges, then answers 500
	wantProblem(t, e.post("k", `{"amount": 1500, "currency": "USD", "payment_method": "pm_card_visa"}`), http.StatusBadGateway, "psp-outcome-unknown")
	order := payments.MerchantOrderID(e.merch.ID, "k")
	r := e.reconciler(e.adapter)
	if sum := e.pass(r); len(sum.Results) != 0 {
		t.Fatalf("the key was looked at before it was due: %+v", sum.Results)
	}
	wantReceived(t, e.event("payment_intent.succeeded", e.stripe.PaymentIntent(order)))
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'processing'`); n != 1 {
		t.Fatal("the notification settled a payment whose key is unfinished")
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS' AND reconcile_after <= NOW(6)`); n != 1 {
		t.Fatal("the key's next look is not due now")
	}
	if sum := e.pass(r); sum.Counts[reconcile.Succeeded] != 1 {
		t.Fatalf("outcomes %v, want one succeeded", sum.Counts)
	}
	wantStatus(t, e.post("k", `{"amount": 1500, "currency": "USD", "payment_method": "pm_card_visa"}`), http.StatusCreated)
}

// A refund Stripe finishes later is settled by its notification, once.
func TestStripeNotificationSettlesPendingRefund(t *testing.T) {
	e := newStripeEnv(t, nil)
	paid := e.post("k", `{"amount": 1500, "currency": "USD", "payment_method": "pm_card_visa"}`)
	wantStatus(t, paid, http.StatusCreated)
	p := decodeView(t, paid.body)
	e.stripe.SetRefundsPending(true)
	amount := int64(1000)
	out, err := e.svc.CreateRefund(context.Background(), payments.RefundRequest{MerchantID: e.merch.ID, PaymentID: p.ID, IdempotencyKey: "r", Amount: &amount})
	if err != nil || out.Response.Status != http.StatusAccepted {
		t.Fatalf("refund: %+v %v", out, err)
	}
	rf, err := e.store.Refund(context.Background(), e.merch.ID, out.SubjectID)
	if err != nil || rf.Status != payments.RefundPending {
		t.Fatalf("refund %+v %v", rf, err)
	}
	e.stripe.FinishRefund(rf.RefundOrderID, "succeeded")
	wantReceived(t, e.event("refund.updated", rf.PSPReference))
	wantReceived(t, e.event("refund.updated", rf.PSPReference))
	rf, err = e.store.Refund(context.Background(), e.merch.ID, rf.ID)
	if err != nil || rf.Status != payments.RefundSucceeded {
		t.Fatalf("refund after the notification: %+v %v", rf, err)
	}
	if got := decodeView(t, e.get("/payments/"+p.ID).body); got.AmountRefunded != 1000 {
		t.Fatalf("payment refunded %d, want 1000", got.AmountRefunded)
	}
	if n := e.count(`SELECT COUNT(*) FROM refund_resolutions WHERE refund_id = ? AND actor = 'psp notification'`, rf.ID); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
	// The refund's key replays the settled refund from then on, as a
	// payment's does (before, it kept replaying 202 pending).
	again, err := e.svc.CreateRefund(context.Background(), payments.RefundRequest{MerchantID: e.merch.ID, PaymentID: p.ID, IdempotencyKey: "r", Amount: &amount})
	if err != nil || !again.Replayed || again.Response.Status != http.StatusCreated || !bytes.Contains(again.Response.Body, []byte(`"status":"succeeded"`)) {
		t.Fatalf("the refund's key replays %d %s (%v), want 201 succeeded", again.Response.Status, again.Response.Body, err)
	}
}

// Toss's notifications are not signed: the gateway fetches the payment from
// Toss before it believes anything. A forged "DONE" for a virtual account
// still waiting changes nothing; the deposit's notification settles it.
func TestTossNotificationSettlesDeposit(t *testing.T) {
	fake := tosstest.New(tossKey)
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	a, err := toss.New(toss.Config{SecretKey: tossKey, BaseURL: ts.URL, ClientKey: tossClient})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(s *envSetup) {
		s.adapter = a
		s.notices = func(st *mysql.Store) api.NoticeReceiver {
			return notices.New(st, map[string]notices.Source{"toss": {PSP: "toss", Reader: a}}, notices.Config{})
		}
	})
	v := e.createLater("k", `{"amount": 15000, "currency": "KRW", "confirm": false}`)
	if c := v.Checkout; c.PSP != "toss" || c.Client != psp.ClientTossWidget || c.PublishableKey != tossClient || c.ConfirmWith != "payment_key" || c.OrderID != v.MerchantOrderID {
		t.Fatalf("checkout %+v", c)
	}
	body := `{"payment_key": "tgen_vbank_1", "amount": 15000, "order_id": "` + v.MerchantOrderID + `"}`
	res := e.confirm(v.ID, "c", body)
	wantStatus(t, res, http.StatusAccepted)
	if got := decodeView(t, res.body); got.Status != payments.RequiresAction || got.NextAction != nil || got.PaymentMethod != "tgen_vbank_1" {
		t.Fatalf("confirm %s", res.body)
	}
	forged := []byte(`{"eventType":"PAYMENT_STATUS_CHANGED","createdAt":"2026-11-30T12:00:00.000000","data":{"paymentKey":"tgen_vbank_1","orderId":"` + v.MerchantOrderID + `","status":"DONE"}}`)
	wantReceived(t, e.notify("/psp/toss/webhook", nil, forged))
	if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.RequiresAction {
		t.Fatalf("a forged notification settled the payment: %s", got.Status)
	}
	fake.Deposit(v.MerchantOrderID, true)
	wantReceived(t, e.notify("/psp/toss/webhook", nil, tosstest.DepositCallback(v.MerchantOrderID, "DONE")))
	wantReceived(t, e.notify("/psp/toss/webhook", nil, fake.Notification(v.MerchantOrderID)))
	replay := e.confirm(v.ID, "c", body)
	wantStatus(t, replay, http.StatusCreated)
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ?`, v.ID); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
	wantProblem(t, e.notify("/psp/toss/webhook", nil, []byte(`{"eventType":"PAYMENT_STATUS_CHANGED","data":{}}`)), http.StatusBadRequest, "notice-rejected")
	if n := fake.Charges(v.MerchantOrderID); n != 1 {
		t.Fatalf("%d confirms at Toss", n)
	}
}

// stubReader is a PSP's notification reader that says what the test sets.
type stubReader struct {
	mu     sync.Mutex
	notice psp.Notice
}

func (s *stubReader) ReadNotice(context.Context, http.Header, []byte) (psp.Notice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notice, nil
}

func (s *stubReader) say(n psp.Notice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notice = n
}

// contradictions counts what notices.Notices reports.
type contradictions struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *contradictions) Contradicted(kind payments.Kind, review bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[fmt.Sprint(kind, review)]++
}

func (c *contradictions) count(kind payments.Kind, review bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[fmt.Sprint(kind, review)]
}

// A refund the gateway settled failed (proven never sent) that its PSP
// then reports succeeded goes to requires_review, its amount reserved on
// the payment again, with the PSP's evidence; when the payment's other
// refunds hold what it would need, nothing changes and the contradiction
// is counted for a person.
func TestNotificationContradictingAFailedRefundIsReviewed(t *testing.T) {
	for _, tc := range []struct {
		name       string
		othersTake bool // another refund takes the whole remainder first
	}{{"reviewed", false}, {"the payment cannot hold it", true}} {
		t.Run(tc.name, func(t *testing.T) {
			reader := &stubReader{}
			seen := &contradictions{n: map[string]int{}}
			var e *env
			e = newEnv(t, func(s *envSetup) {
				s.notices = func(st *mysql.Store) api.NoticeReceiver {
					src := notices.Source{PSP: payments.PSPName(fake.New().Capabilities()), Reader: reader}
					return notices.New(st, map[string]notices.Source{"toss": src}, notices.Config{Observer: seen})
				}
			})
			pay := decodeView(t, e.post("p", okBody).body) // 1000 KRW
			path := "/payments/" + pay.ID + "/refunds"
			refund := func(key, body string) response {
				t.Helper()
				res, err := e.do(t.Context(), http.MethodPost, path, e.apiKey, map[string]string{"Idempotency-Key": key}, body)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			e.psp.FailNextRefunds(fake.FaultNotProcessed, 1)
			wantProblem(t, refund("r1", `{"amount": 300}`), http.StatusServiceUnavailable, "psp-unavailable")
			e.advance(31 * time.Second)
			e.pass(e.reconciler(nil))
			var r1 struct{ ID, Status, RefundOrderID string }
			if err := e.db.QueryRow(`SELECT id, status, refund_order_id FROM refunds WHERE idem_key = 'r1'`).Scan(&r1.ID, &r1.Status, &r1.RefundOrderID); err != nil || r1.Status != "failed" {
				t.Fatalf("the refund never sent: %+v %v, want failed", r1, err)
			}
			if tc.othersTake {
				wantStatus(t, refund("r2", `{}`), http.StatusCreated)
			}

			reader.say(psp.Notice{ID: "evt_1", Type: "refund.succeeded", Refunds: []psp.Refund{{RefundOrderID: r1.RefundOrderID,
				Reference: "fake_re_99", Status: psp.RefundSucceeded, Amount: 300, Currency: "KRW"}}})
			wantReceived(t, e.notify("/psp/toss/webhook", nil, []byte(`{}`)))
			var status string
			var reserved int64
			if err := e.db.QueryRow(`SELECT r.status, p.amount_reserved FROM refunds r JOIN payments p ON p.id = r.payment_id WHERE r.id = ?`, r1.ID).Scan(&status, &reserved); err != nil {
				t.Fatal(err)
			}
			audit := e.count(`SELECT COUNT(*) FROM refund_resolutions WHERE refund_id = ? AND to_status = 'requires_review' AND psp_reference = 'fake_re_99'`, r1.ID)
			events := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ? AND type = 'refund.requires_review'`, r1.ID)
			if tc.othersTake {
				if status != "failed" || reserved != 1000 || audit != 0 || events != 0 || seen.count(payments.KindRefund, false) != 1 {
					t.Fatalf("refund %s, reserved %d, %d audit rows, %d events, counted %v; want it left failed and counted", status, reserved, audit, events, seen.n)
				}
				return
			}
			if status != "requires_review" || reserved != 300 || audit != 1 || events != 1 || seen.count(payments.KindRefund, true) != 1 {
				t.Fatalf("refund %s, reserved %d, %d audit rows, %d events, counted %v; want requires_review holding 300", status, reserved, audit, events, seen.n)
			}
			wantReceived(t, e.notify("/psp/toss/webhook", nil, []byte(`{}`))) // again: nothing more
			if n := e.count(`SELECT COUNT(*) FROM refund_resolutions WHERE refund_id = ?`, r1.ID); n != 1 {
				t.Fatalf("%d resolutions after a repeat", n)
			}
		})
	}
}

// A notification that arrives while a worker holds the payment's key (its
// charge in flight) makes the payment's next look due at once when the
// worker then settles it waiting for its customer: the notification is
// acted on by the next reconciler pass, not a minute later as before.
func TestANotificationDuringTheChargeMakesTheActionLookDueAtOnce(t *testing.T) {
	reader := &stubReader{}
	var e *env
	e = newEnv(t, func(s *envSetup) {
		s.notices = func(st *mysql.Store) api.NoticeReceiver {
			src := notices.Source{PSP: payments.PSPName(fake.New().Capabilities()), Reader: reader}
			return notices.New(st, map[string]notices.Source{"toss": src}, notices.Config{})
		}
	})
	v := e.createLater("k", laterBody)
	var during response
	e.psp.SetChargeHook(func(ctx context.Context, req psp.ChargeRequest) {
		reader.say(psp.Notice{ID: "evt_1", Type: "payment.updated", Charges: []psp.Charge{{MerchantOrderID: req.MerchantOrderID,
			Reference: "fake_ch_1", Status: psp.Succeeded, Amount: req.Amount, Currency: req.Currency}}})
		res, err := e.do(ctx, http.MethodPost, "/psp/toss/webhook", "", map[string]string{"Content-Type": "application/json"}, `{}`)
		if err == nil {
			during = res
		}
	})
	wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_3ds"}`), http.StatusAccepted)
	wantReceived(t, during)
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'requires_action' AND review_after <= NOW(6)`); n != 1 {
		t.Fatal("the payment waiting for its customer is not due for a look at once")
	}
}

// With several PSP accounts, each account's notifications come to its own
// route and are matched only to payments sent to that account: a report
// about the same order id from another account settles nothing.
func TestAccountNotificationsAreMatchedToTheirAccountOnly(t *testing.T) {
	reader := &stubReader{}
	mine := payments.PSPName(fake.New().Capabilities())
	e := newEnv(t, func(s *envSetup) {
		s.notices = func(st *mysql.Store) api.NoticeReceiver {
			return notices.New(st, map[string]notices.Source{
				api.AccountNoticeSource("fake_other"): {PSP: "fake_other", Reader: reader},
				api.AccountNoticeSource(mine):         {PSP: mine, Reader: reader},
			}, notices.Config{})
		}
	})
	v := e.createLater("k", laterBody)
	wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_3ds"}`), http.StatusAccepted)
	c, err := e.psp.Lookup(t.Context(), v.MerchantOrderID)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err = e.psp.ThreeDS(c.Reference, true)
	if err != nil || c.Status != psp.Succeeded {
		t.Fatalf("3-D Secure: %+v %v", c, err)
	}
	reader.say(psp.Notice{ID: "evt_1", Type: "charge.succeeded", Charges: []psp.Charge{c}})

	wantReceived(t, e.notify("/psp/accounts/fake_other/webhook", nil, []byte(`{}`)))
	if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.RequiresAction {
		t.Fatalf("another account's notification settled the payment: %s", got.Status)
	}
	wantReceived(t, e.notify("/psp/accounts/"+mine+"/webhook", nil, []byte(`{}`)))
	if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.Succeeded {
		t.Fatalf("its own account's notification left it %s", got.Status)
	}
	// An account that is not configured has no route.
	wantProblem(t, e.notify("/psp/accounts/nobody/webhook", nil, []byte(`{}`)), http.StatusNotFound, "not-found")
}
