package api_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// The two-step checkout through the API: create with "confirm": false,
// then POST /payments/{id}/confirm with a key of its own.

const laterBody = `{"amount": 1000, "currency": "KRW", "confirm": false, "description": "Order B-1"}`

// confirm sends POST /payments/{id}/confirm as the env's merchant.
func (e *env) confirm(id, key, body string) response {
	e.t.Helper()
	res, err := e.do(context.Background(), http.MethodPost, "/payments/"+id+"/confirm", e.apiKey,
		map[string]string{"Idempotency-Key": key}, body)
	if err != nil {
		e.t.Fatalf("POST /payments/%s/confirm: %v", id, err)
	}
	return res
}

// createLater creates a payment to confirm later and checks the answer.
func (e *env) createLater(key, body string) payments.View {
	e.t.Helper()
	res := e.post(key, body)
	wantStatus(e.t, res, http.StatusAccepted)
	v := decodeView(e.t, res.body)
	if v.Status != payments.RequiresConfirmation || v.ExpiresAt == nil || v.Checkout == nil {
		e.t.Fatalf("created: %s", res.body)
	}
	return v
}

// reconciler is a reconciler over the env's store and PSP.
func (e *env) reconciler(adapter psp.Adapter) *reconcile.Reconciler {
	if adapter == nil {
		adapter = e.psp
	}
	return reconcile.New(e.store, payments.OnePSP(adapter), reconcile.Config{Lease: 30 * time.Second, PSPTimeout: time.Second,
		MaxAttempts: 3, Now: e.clock.Now})
}

func (e *env) pass(r *reconcile.Reconciler) reconcile.Summary {
	e.t.Helper()
	sum, err := r.RunOnce(context.Background())
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	return sum
}

// Every outcome of a charge, through the two steps: the creation calls no
// PSP and its answer is stored at once; the confirm runs the charge with
// its own key, stored and replayed; the creation's key goes on replaying
// the creation.
func TestTwoStepCheckoutOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		status       int
		want         payments.Status
		charges      int
		action       bool
	}{
		{"succeeds", fake.MethodOK, http.StatusCreated, payments.Succeeded, 1, false},
		{"declined", fake.MethodDeclined, http.StatusPaymentRequired, payments.Declined, 1, false},
		{"refused as invalid", fake.MethodInvalidRequest, http.StatusPaymentRequired, payments.Failed, 0, false},
		{"needs 3-D Secure", fake.MethodThreeDS, http.StatusAccepted, payments.RequiresAction, 1, true},
		{"virtual account", fake.MethodVirtualAccount, http.StatusAccepted, payments.RequiresAction, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			created := e.post("create-1", laterBody)
			wantStatus(t, created, http.StatusAccepted)
			v := decodeView(t, created.body)
			c := v.Checkout
			if v.Status != payments.RequiresConfirmation || v.ExpiresAt == nil || c == nil || c.PSP != "fake" || c.Client != psp.ClientNone ||
				c.OrderID != v.MerchantOrderID || c.Amount != 1000 || c.Currency != "KRW" || c.ConfirmWith != "payment_method" {
				t.Fatalf("created: %s", created.body)
			}
			if v.MerchantOrderID != payments.MerchantOrderID(e.merch.ID, "create-1") {
				t.Fatalf("merchant_order_id %s is not the key's", v.MerchantOrderID)
			}
			e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 0, chargeCalls: 0})
			if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.RequiresConfirmation || got.Checkout == nil {
				t.Fatalf("GET before the confirm: %+v", got)
			}

			res := e.confirm(v.ID, "confirm-1", `{"payment_method": "`+tc.method+`"}`)
			wantStatus(t, res, tc.status)
			got := decodeView(t, res.body)
			if got.ID != v.ID || got.Status != tc.want || got.PaymentMethod != tc.method || got.Checkout != nil || got.ExpiresAt != nil {
				t.Fatalf("confirm answered %s", res.body)
			}
			if (got.NextAction != nil) != tc.action || (tc.action && (got.NextAction.Type != psp.NextActionRedirect || !strings.HasPrefix(got.NextAction.URL, "/3ds/"))) {
				t.Fatalf("next_action %+v, want one: %v", got.NextAction, tc.action)
			}
			again := e.confirm(v.ID, "confirm-1", `{"payment_method": "`+tc.method+`"}`)
			if again.status != res.status || !bytes.Equal(again.body, res.body) || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("confirm replay: %d %s", again.status, again.body)
			}
			replay := e.post("create-1", laterBody)
			if replay.status != http.StatusAccepted || !bytes.Equal(replay.body, created.body) || replay.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("creation replay after the confirm: %d %s", replay.status, replay.body)
			}
			if now := decodeView(t, e.get("/payments/"+v.ID).body); now.Status != tc.want {
				t.Fatalf("GET after the confirm: %s", now.Status)
			}
			e.wantCounts(counts{payments: 1, keys: 2, completed: 2, charges: tc.charges, chargeCalls: 1})
			if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE endpoint = ? AND subject_id = ?`, payments.EndpointConfirmPayment, v.ID); n != 1 {
				t.Fatalf("%d confirm keys name the payment, want 1", n)
			}
		})
	}
}

// A confirm that cannot run is refused before anything is stored or sent:
// its key stays free.
func TestConfirmRefusals(t *testing.T) {
	e := newEnv(t)
	oneStep := decodeView(t, e.post("one-step", okBody).body)
	res := e.confirm(oneStep.ID, "c-1", `{"payment_method": "pm_card_ok"}`)
	wantProblem(t, res, http.StatusConflict, "payment-not-confirmable")
	if !bytes.Contains(res.body, []byte(`"payment_id":"`+oneStep.ID+`"`)) {
		t.Fatalf("409 does not name the payment: %s", res.body)
	}

	v := e.createLater("later", laterBody)
	for _, body := range []string{
		`{"payment_method": "pm_card_ok", "amount": 999}`,
		`{"payment_method": "pm_card_ok", "order_id": "ord_000000000000000000000000"}`,
	} {
		wantProblem(t, e.confirm(v.ID, "c-2", body), http.StatusUnprocessableEntity, "confirm-mismatch")
	}
	wantProblem(t, e.confirm(v.ID, "c-2", `{}`), http.StatusBadRequest, "invalid-request") // created without a payment method
	wantProblem(t, e.confirm(v.ID, "c-2", `{"payment_method": "pm_card_ok", "payment_key": "tgen_1"}`), http.StatusBadRequest, "invalid-request")
	wantProblem(t, e.confirm(v.ID, "c-2", `{"payment_method": "pm_card_ok", "amount": "1000"}`), http.StatusBadRequest, "invalid-request")
	wantProblem(t, e.confirm("pay_01KB4ZQ4C9V8X2M3N5P7R9T1W3", "c-2", `{"payment_method": "pm_card_ok"}`), http.StatusNotFound, "not-found")
	_, otherKey := e.newMerchant("Other merchant")
	res, err := e.do(context.Background(), http.MethodPost, "/payments/"+v.ID+"/confirm", otherKey, map[string]string{"Idempotency-Key": "c-2"}, `{"payment_method": "pm_card_ok"}`)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, res, http.StatusNotFound, "not-found")
	noKey, err := e.do(context.Background(), http.MethodPost, "/payments/"+v.ID+"/confirm", e.apiKey, nil, `{"payment_method": "pm_card_ok"}`)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, noKey, http.StatusBadRequest, "invalid-idempotency-key")
	// The creation's key is the creation's: the same key for a one-step payment is another request.
	wantProblem(t, e.post("later", `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "description": "Order B-1"}`),
		http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	e.wantCounts(counts{payments: 2, keys: 2, completed: 2, charges: 1, chargeCalls: 1})

	// Every refusal left the key free: the same key now confirms.
	wantStatus(t, e.confirm(v.ID, "c-2", `{"payment_method": "pm_card_ok", "amount": 1000, "order_id": "`+v.MerchantOrderID+`"}`), http.StatusCreated)
	// Confirmed: another key finds it no longer confirmable.
	wantProblem(t, e.confirm(v.ID, "c-3", `{"payment_method": "pm_card_ok"}`), http.StatusConflict, "payment-not-confirmable")

	// A payment method given at creation is the confirm's when it gives none.
	withMethod := e.createLater("later-2", `{"amount": 1000, "currency": "KRW", "confirm": false, "payment_method": "pm_card_declined"}`)
	res = e.confirm(withMethod.ID, "c-4", `{}`)
	wantStatus(t, res, http.StatusPaymentRequired)
	if got := decodeView(t, res.body); got.PaymentMethod != fake.MethodDeclined {
		t.Fatalf("confirm used %q", got.PaymentMethod)
	}
	e.wantCounts(counts{payments: 3, keys: 5, completed: 5, charges: 3, chargeCalls: 3})
}

// Confirms racing for one payment: with different keys, one charges and the
// others find it taken (409, nothing stored); with one key, one charges and
// the others replay its answer or are told to retry.
func TestConcurrentConfirms(t *testing.T) {
	for _, sameKey := range []bool{false, true} {
		name := "different keys"
		if sameKey {
			name = "same key"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.psp.SetLatency(50 * time.Millisecond) // keep the first confirm in flight while the others arrive
			v := e.createLater("race", laterBody)
			const n = 20
			var (
				start = make(chan struct{})
				wg    sync.WaitGroup
				res   = make([]response, n)
			)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					key := "confirm-race"
					if !sameKey {
						key += "-" + string(rune('a'+i))
					}
					var err error
					res[i], err = e.do(context.Background(), http.MethodPost, "/payments/"+v.ID+"/confirm", e.apiKey,
						map[string]string{"Idempotency-Key": key}, `{"payment_method": "pm_card_ok"}`)
					if err != nil {
						t.Error(err)
					}
				}()
			}
			close(start)
			wg.Wait()
			var first []byte
			created, refused := 0, 0
			for i := range n {
				switch res[i].status {
				case http.StatusCreated:
					created++
					if first == nil {
						first = res[i].body
					} else if !bytes.Equal(first, res[i].body) {
						t.Fatalf("two different answers:\n%s\n%s", first, res[i].body)
					}
				case http.StatusConflict:
					refused++
					slug := "payment-not-confirmable"
					if sameKey {
						slug = "request-in-flight"
					}
					wantProblem(t, res[i], http.StatusConflict, slug)
				default:
					t.Fatalf("confirm %d: %d %s", i, res[i].status, res[i].body)
				}
			}
			if created == 0 || (!sameKey && created != 1) {
				t.Fatalf("%d confirms charged (%d refused)", created, refused)
			}
			t.Logf("%d × 201, %d × 409", created, refused)
			e.wantCounts(counts{payments: 1, keys: 2, completed: 2, charges: 1, chargeCalls: 1})
			if c := e.psp.ChargesFor(v.MerchantOrderID); c != 1 {
				t.Fatalf("%d charges for the order", c)
			}
		})
	}
}

// A confirm whose answer was lost resumes like any payment: the retry with
// the same key asks the PSP first and never charges twice.
func TestConfirmResumes(t *testing.T) {
	t.Run("answer lost after the charge", func(t *testing.T) {
		e := newEnv(t)
		v := e.createLater("k", laterBody)
		e.psp.FailNextCharges(fake.FaultUnknownAfterCharge, 1)
		wantProblem(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_ok"}`), http.StatusBadGateway, "psp-outcome-unknown")
		if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.Processing {
			t.Fatalf("status %s while unknown", got.Status)
		}
		wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_ok"}`), http.StatusCreated)
		e.wantCounts(counts{payments: 1, keys: 2, completed: 2, charges: 1, chargeCalls: 1})
	})
	t.Run("not processed, then sent again", func(t *testing.T) {
		e := newEnv(t)
		v := e.createLater("k", laterBody)
		e.psp.FailNextCharges(fake.FaultNotProcessed, 1)
		wantProblem(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_ok"}`), http.StatusServiceUnavailable, "psp-unavailable")
		wantStatus(t, e.confirm(v.ID, "c", `{"payment_method": "pm_card_ok"}`), http.StatusCreated)
		e.wantCounts(counts{payments: 1, keys: 2, completed: 2, charges: 1, chargeCalls: 2})
	})
	t.Run("lease taken over while the first worker stalls", func(t *testing.T) {
		e := newEnv(t)
		v := e.createLater("k", laterBody)
		arrived, release := make(chan struct{}), make(chan struct{})
		var calls atomic.Int32
		var allowed []bool
		var mu sync.Mutex
		e.psp.SetChargeHook(func(ctx context.Context, req psp.ChargeRequest) {
			mu.Lock()
			allowed = append(allowed, req.AllowNextAction)
			mu.Unlock()
			if calls.Add(1) == 1 {
				close(arrived)
				<-release
			}
		})
		firstDone := make(chan response, 1)
		go func() { firstDone <- e.confirm(v.ID, "c", `{"payment_method": "pm_card_3ds"}`) }()
		<-arrived
		e.advance(31 * time.Second) // the first worker's lease has expired
		second := e.confirm(v.ID, "c", `{"payment_method": "pm_card_3ds"}`)
		wantStatus(t, second, http.StatusAccepted)
		if got := decodeView(t, second.body); got.Status != payments.RequiresAction || got.NextAction == nil {
			t.Fatalf("resumed confirm: %s", second.body)
		}
		close(release)
		first := <-firstDone
		if first.status != second.status || !bytes.Equal(first.body, second.body) {
			t.Fatalf("the stale worker answered otherwise:\n%s\n%s", first.body, second.body)
		}
		mu.Lock()
		defer mu.Unlock()
		for i, a := range allowed {
			if !a {
				t.Fatalf("charge %d of a confirm was sent without AllowNextAction", i+1)
			}
		}
		e.wantCounts(counts{payments: 1, keys: 2, completed: 2, charges: 1, chargeCalls: 2})
	})
}

// Nobody confirmed it in time: the confirm refuses it on the database's
// clock at once, and the reconciler cancels it; a fresh one is untouched.
func TestUnconfirmedPaymentsExpire(t *testing.T) {
	e := newEnv(t, func(s *envSetup) { s.cfg.ConfirmExpiry = 10 * time.Minute })
	old := e.createLater("old", laterBody)
	e.advance(11 * time.Minute)
	fresh := e.createLater("fresh", laterBody)
	res := e.confirm(old.ID, "c-old", `{"payment_method": "pm_card_ok"}`)
	wantProblem(t, res, http.StatusConflict, "payment-not-confirmable")
	if !bytes.Contains(res.body, []byte("expired")) {
		t.Fatalf("refusal does not say it expired: %s", res.body)
	}
	sum := e.pass(e.reconciler(nil))
	if sum.Counts[reconcile.Canceled] != 1 {
		t.Fatalf("outcomes %v, want one canceled", sum.Counts)
	}
	got := decodeView(t, e.get("/payments/"+old.ID).body)
	if got.Status != payments.Canceled || got.DeclineCode == nil || *got.DeclineCode != payments.DeclineExpired || got.ExpiresAt == nil || got.Checkout != nil {
		t.Fatalf("expired payment: %+v", got)
	}
	wantProblem(t, e.confirm(old.ID, "c-old", `{"payment_method": "pm_card_ok"}`), http.StatusConflict, "payment-not-confirmable")
	for status, want := range map[string]string{"canceled": old.ID, "requires_confirmation": fresh.ID} {
		if l := decodeJSON[listOf[payments.View]](t, e.get("/payments?status="+status).body); len(l.Data) != 1 || l.Data[0].ID != want {
			t.Fatalf("GET /payments?status=%s: %+v", status, l.Data)
		}
	}
	if sum := e.pass(e.reconciler(nil)); sum.Counts[reconcile.Canceled] != 0 {
		t.Fatalf("a second pass canceled again: %v", sum.Counts)
	}
	wantStatus(t, e.confirm(fresh.ID, "c-fresh", `{"payment_method": "pm_card_ok"}`), http.StatusCreated)
	e.wantCounts(counts{payments: 2, keys: 3, completed: 3, charges: 1, chargeCalls: 1})
}

// A payment waiting for its customer is settled by the reconciler's look at
// the PSP once its customer acted: the confirm's key replays the outcome,
// with an audit row.
func TestRequiresActionSettledByTheReconciler(t *testing.T) {
	e := newEnv(t)
	r := e.reconciler(nil)
	threeDS := e.createLater("a", laterBody)
	deposit := e.createLater("b", laterBody)
	wantStatus(t, e.confirm(threeDS.ID, "ca", `{"payment_method": "pm_card_3ds"}`), http.StatusAccepted)
	wantStatus(t, e.confirm(deposit.ID, "cb", `{"payment_method": "pm_virtual_account"}`), http.StatusAccepted)
	if _, err := e.psp.Settle(threeDS.MerchantOrderID, psp.Succeeded, ""); err != nil {
		t.Fatal(err)
	}
	if sum := e.pass(r); len(sum.Results) != 0 {
		t.Fatalf("looked before the first look was due: %+v", sum.Results)
	}
	e.advance(payments.ActionFirstLook + time.Second)
	sum := e.pass(r)
	if sum.Counts[reconcile.Succeeded] != 1 || sum.Counts[reconcile.AwaitingCustomer] != 1 {
		t.Fatalf("outcomes %v, want one succeeded, one still waiting", sum.Counts)
	}
	replay := e.confirm(threeDS.ID, "ca", `{"payment_method": "pm_card_3ds"}`)
	wantStatus(t, replay, http.StatusCreated)
	if replay.header.Get("Idempotent-Replayed") != "true" || decodeView(t, replay.body).Status != payments.Succeeded {
		t.Fatalf("confirm replay after the settle: %s", replay.body)
	}
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ? AND from_status = 'requires_action' AND to_status = 'succeeded' AND actor = 'reconciler'`, threeDS.ID); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
	// The deposit arrives after; the next look (on its back-off) settles it.
	if _, err := e.psp.Settle(deposit.MerchantOrderID, psp.Declined, "virtual_account_expired"); err != nil {
		t.Fatal(err)
	}
	e.advance(10 * time.Minute)
	if sum := e.pass(r); sum.Counts[reconcile.Declined] != 1 {
		t.Fatalf("outcomes %v, want one declined", sum.Counts)
	}
	wantStatus(t, e.confirm(deposit.ID, "cb", `{"payment_method": "pm_virtual_account"}`), http.StatusPaymentRequired)
	e.wantCounts(counts{payments: 2, keys: 4, completed: 4, charges: 2, chargeCalls: 2})
}

// The answer of a confirm that needs the customer holds the client secret
// the front end needs; the logs never do.
func TestClientSecretNeverLogged(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, func(s *envSetup) {
		s.cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s.adapter = secretive{fake.New()}
	})
	v := e.createLater("k", laterBody)
	res := e.confirm(v.ID, "c", `{"payment_method": "pm_card_3ds"}`)
	wantStatus(t, res, http.StatusAccepted)
	got := decodeView(t, res.body)
	if got.NextAction == nil || got.NextAction.ClientSecret != secretOf {
		t.Fatalf("next_action %+v lacks the client secret", got.NextAction)
	}
	logged := logs.buf.String()
	if strings.Contains(logged, secretOf) {
		t.Fatal("the client secret reached the logs")
	}
	if !strings.Contains(logged, "payment waits for its customer") {
		t.Fatalf("no log of the wait: %s", logged)
	}
}

const secretOf = "pi_1_secret_do_not_log"

// secretive is the fake PSP whose next actions carry a client secret, as
// Stripe's do.
type secretive struct{ *fake.PSP }

func (s secretive) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	c, err := s.PSP.Charge(ctx, req)
	if c.NextAction != nil {
		c.NextAction.ClientSecret = secretOf
	}
	return c, err
}

// A replica that cannot reach the payment's PSP refuses the confirm before
// it takes the payment: nothing changes, and a replica that can confirms it.
func TestConfirmWithoutThePaymentsPSP(t *testing.T) {
	e := newEnv(t)
	v := e.createLater("k", laterBody)
	if _, err := e.db.Exec(`UPDATE payments SET psp = 'fake:elsewhere' WHERE id = ?`, v.ID); err != nil {
		t.Fatal(err)
	}
	res := e.confirm(v.ID, "c", `{"payment_method": "pm_card_ok"}`)
	wantProblem(t, res, http.StatusServiceUnavailable, "service-unavailable")
	if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.RequiresConfirmation {
		t.Fatalf("status %s after a refused confirm", got.Status)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 0, chargeCalls: 0})
}
