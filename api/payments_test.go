package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
)

func decodeView(t *testing.T, body []byte) payments.View {
	t.Helper()
	var v payments.View
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

// 1. same key + same body → identical replay, 1 payment, 1 charge.
func TestReplaySameKeySameBody(t *testing.T) {
	e := newEnv(t)
	first := e.post("key-1", okBody)
	wantStatus(t, first, http.StatusCreated)
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("fresh response marked as replay")
	}
	v := decodeView(t, first.body)
	if v.Status != payments.Succeeded || v.Amount != 1000 || v.Currency != "KRW" || v.PSPReference == nil ||
		v.MerchantOrderID != payments.MerchantOrderID(e.merch.ID, "key-1") || v.Metadata["order"] != "A-1" {
		t.Fatalf("unexpected payment %+v", v)
	}
	if loc := first.header.Get("Location"); loc != "/payments/"+v.ID {
		t.Fatalf("Location %q", loc)
	}

	second := e.post("key-1", okBody)
	wantStatus(t, second, first.status)
	if !bytes.Equal(second.body, first.body) {
		t.Fatalf("replay body differs:\n%s\n%s", first.body, second.body)
	}
	if second.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay lacks Idempotent-Replayed: true")
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}

// 2. same key + different body → 422, nothing changed.
func TestSameKeyDifferentBodyIsRefused(t *testing.T) {
	e := newEnv(t)
	first := e.post("key-1", okBody)
	wantStatus(t, first, http.StatusCreated)
	var before []byte
	if err := e.db.Get(&before, `SELECT response_body FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"amount":   strings.Replace(okBody, "1000", "1001", 1),
		"currency": strings.Replace(okBody, "KRW", "JPY", 1),
		"method":   strings.Replace(okBody, "pm_card_ok", "pm_card_declined", 1),
		"metadata": strings.Replace(okBody, `"web"`, `"app"`, 1),
		"omitted":  `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok"}`,
	} {
		t.Run(name, func(t *testing.T) {
			wantProblem(t, e.post("key-1", body), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
		})
	}
	var after []byte
	if err := e.db.Get(&after, `SELECT response_body FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("stored response changed")
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
	// The original still replays.
	if res := e.post("key-1", okBody); !bytes.Equal(res.body, first.body) {
		t.Fatalf("replay after mismatch differs: %s", res.body)
	}
}

// 3. 50 concurrent requests with one key → 1 payment, 1 charge; every answer is the original or 409.
func TestConcurrentDuplicates(t *testing.T) {
	e := newEnv(t)
	e.psp.SetLatency(50 * time.Millisecond) // keep the first request in flight while the others arrive
	const n = 50
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		res   = make([]response, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i], errs[i] = e.do(context.Background(), http.MethodPost, "/payments", e.apiKey,
				map[string]string{"Idempotency-Key": "hot-key"}, okBody)
		}()
	}
	close(start)
	wg.Wait()
	var original []byte
	created, conflicts := 0, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		switch res[i].status {
		case http.StatusCreated:
			created++
			if original == nil {
				original = res[i].body
			} else if !bytes.Equal(original, res[i].body) {
				t.Fatalf("two different 201 bodies:\n%s\n%s", original, res[i].body)
			}
		case http.StatusConflict:
			conflicts++
			wantProblem(t, res[i], http.StatusConflict, "request-in-flight")
			if res[i].header.Get("Retry-After") == "" {
				t.Fatal("409 without Retry-After")
			}
		default:
			t.Fatalf("request %d: unexpected status %d: %s", i, res[i].status, res[i].body)
		}
	}
	if created == 0 {
		t.Fatal("no request got the original answer")
	}
	t.Logf("%d × 201, %d × 409", created, conflicts)
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
	if e.psp.ChargesFor(payments.MerchantOrderID(e.merch.ID, "hot-key")) != 1 {
		t.Fatal("the key's order id was not charged exactly once")
	}
}

// 4. the client's connection is cut after the claim committed → the payment
// finishes anyway and the retry gets the stored response; 1 charge.
func TestResponseLostAfterCommit(t *testing.T) {
	e := newEnv(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.psp.SetChargeHook(func(ctx context.Context, req psp.ChargeRequest) {
		once.Do(func() { close(arrived) })
		<-release
	})
	ctx, cancel := context.WithCancel(context.Background())
	clientDone := make(chan error, 1)
	go func() {
		_, err := e.do(ctx, http.MethodPost, "/payments", e.apiKey, map[string]string{"Idempotency-Key": "lost"}, okBody)
		clientDone <- err
	}()
	<-arrived // the claim is committed: the PSP is being asked
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`); n != 1 {
		t.Fatalf("%d in-progress keys while the PSP is called, want 1", n)
	}
	cancel()
	if err := <-clientDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v, want canceled", err)
	}
	close(release)

	retry := e.post("lost", okBody) // waits for the first worker, then replays
	wantStatus(t, retry, http.StatusCreated)
	if retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("retry not marked as replay")
	}
	var stored []byte
	if err := e.db.Get(&stored, `SELECT response_body FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, retry.body) {
		t.Fatalf("retry body differs from the stored response")
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}

// 5. a failure before commit rolls everything back → the retry runs normally.
func TestFailureBeforeCommitLeavesKeyFree(t *testing.T) {
	e := newEnv(t)
	// A real server-side failure inside the claim transaction, after the key row was inserted.
	if _, err := e.db.Exec(`CREATE TRIGGER fail_payment_insert BEFORE INSERT ON payments FOR EACH ROW
		SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected failure'`); err != nil {
		t.Fatal(err)
	}
	res := e.post("rollback", okBody)
	wantProblem(t, res, http.StatusInternalServerError, "internal")
	if bytes.Contains(res.body, []byte("injected")) {
		t.Fatal("internal error detail leaked to the client")
	}
	e.wantCounts(counts{})

	if _, err := e.db.Exec(`DROP TRIGGER fail_payment_insert`); err != nil {
		t.Fatal(err)
	}
	retry := e.post("rollback", okBody)
	wantStatus(t, retry, http.StatusCreated)
	if retry.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("retry after rollback must be a fresh execution")
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}

// 6. PSP faults: nothing is stored, the retry resumes (lookup first) and the
// customer is charged once.
func TestPSPFaultsThenRetry(t *testing.T) {
	cases := []struct {
		name        string
		fault       fake.Fault
		status      int
		slug        string
		chargesMid  int // ledger after the failed call
		chargeCalls int // total Charge calls after the retry
	}{
		{"unknown after charge", fake.FaultUnknownAfterCharge, http.StatusBadGateway, "psp-outcome-unknown", 1, 1},
		{"unknown before charge", fake.FaultUnknownBeforeCharge, http.StatusBadGateway, "psp-outcome-unknown", 0, 2},
		{"not processed", fake.FaultNotProcessed, http.StatusServiceUnavailable, "psp-unavailable", 0, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.psp.FailNextCharges(tc.fault, 1)
			res := e.post("k", okBody)
			wantProblem(t, res, tc.status, tc.slug)
			if res.header.Get("Retry-After") == "" {
				t.Fatal("no Retry-After")
			}
			e.wantCounts(counts{payments: 1, keys: 1, completed: 0, charges: tc.chargesMid, chargeCalls: 1})
			if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE response_body IS NOT NULL`); n != 0 {
				t.Fatal("a failed PSP call stored a response")
			}
			if n := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'processing'`); n != 1 {
				t.Fatal("payment not left processing")
			}

			retry := e.post("k", okBody)
			wantStatus(t, retry, http.StatusCreated)
			if e.psp.LookupCalls() != 1 {
				t.Fatalf("retry made %d lookups, want 1 (lookup first)", e.psp.LookupCalls())
			}
			v := decodeView(t, retry.body)
			ledger := e.psp.Charges()
			if len(ledger) != 1 || v.PSPReference == nil || *v.PSPReference != ledger[0].Reference {
				t.Fatalf("payment %+v does not match ledger %+v", v, ledger)
			}
			e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: tc.chargeCalls})
			if again := e.post("k", okBody); !bytes.Equal(again.body, retry.body) || again.status != http.StatusCreated {
				t.Fatal("settled payment does not replay")
			}
		})
	}
}

// A lookup that cannot answer leaves the payment unsettled and uncharged.
func TestResumeWithUnknownLookupDoesNotCharge(t *testing.T) {
	e := newEnv(t)
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	wantStatus(t, e.post("k", okBody), http.StatusBadGateway)
	e.psp.FailNextLookups(1)
	wantProblem(t, e.post("k", okBody), http.StatusBadGateway, "psp-outcome-unknown")
	e.wantCounts(counts{payments: 1, keys: 1, completed: 0, charges: 0, chargeCalls: 1})
	wantStatus(t, e.post("k", okBody), http.StatusCreated)
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 2})
}

// 7. an expired lease is taken over while the first worker still runs →
// the first worker's late write is refused by the fencing token; 1 charge.
func TestLeaseTakeoverFencesTheStaleWorker(t *testing.T) {
	e := newEnv(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	e.psp.SetChargeHook(func(ctx context.Context, req psp.ChargeRequest) {
		if calls.Add(1) == 1 { // only the first worker stalls, before the PSP acts
			close(arrived)
			<-release
		}
	})
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.post("slow", okBody) }()
	<-arrived

	e.advance(31 * time.Second) // the first worker's 30 s lease has expired
	second := e.post("slow", okBody)
	wantStatus(t, second, http.StatusCreated)
	var grant int64
	if err := e.db.Get(&grant, `SELECT lease_version >> 32 FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	if grant != 2 {
		t.Fatalf("lease grant %d, want 2 after one takeover", grant)
	}

	close(release) // the stale worker now gets its (deduplicated) charge and tries to write
	first := <-firstDone
	wantStatus(t, first, http.StatusCreated)
	if !bytes.Equal(first.body, second.body) {
		t.Fatalf("stale worker answered differently:\n%s\n%s", first.body, second.body)
	}
	var stored []byte
	if err := e.db.Get(&stored, `SELECT response_body FROM idempotency_keys WHERE lease_version >> 32 = 2 AND state = 'COMPLETED'`); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, second.body) {
		t.Fatal("stored response is not the lease holder's")
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 2})
}

// The fencing token at the store: a write with an old lease version changes nothing.
func TestSettleWithStaleVersionIsRefused(t *testing.T) {
	e := newEnv(t)
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	wantStatus(t, e.post("k", okBody), http.StatusBadGateway)
	ref := idemkeys.Ref{MerchantID: e.merch.ID, Endpoint: payments.EndpointCreatePayment, Key: "k"}
	ctx := context.Background()
	rec, p, err := e.store.LoadKey(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	token, err := e.store.TakeOver(ctx, ref, rec.Token, time.Minute)
	if err != nil || token.Grant() != rec.Token.Grant()+1 {
		t.Fatalf("takeover: token %x err=%v", token, err)
	}
	if _, err := e.store.TakeOver(ctx, ref, rec.Token, time.Minute); !errors.Is(err, idemkeys.ErrFenced) {
		t.Fatalf("second takeover from the same token: %v, want ErrFenced", err)
	}
	p.Status = payments.Succeeded
	err = e.store.Settle(ctx, ref, rec.Token, payments.PaymentSettled(p))
	if !errors.Is(err, idemkeys.ErrFenced) {
		t.Fatalf("stale settle: %v, want ErrFenced", err)
	}
	if err := e.store.Release(ctx, ref, rec.Token, false); !errors.Is(err, idemkeys.ErrFenced) {
		t.Fatalf("stale release: %v, want ErrFenced", err)
	}
	// The same grant number with another random part is another token.
	if err := e.store.ArmSend(ctx, ref, idemkeys.Token(int64(token)^1), time.Minute, payments.ArmGuard{Forever: true}); !errors.Is(err, idemkeys.ErrFenced) {
		t.Fatalf("arm with a token of the right grant but not the holder's: %v, want ErrFenced", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'processing'`); n != 1 {
		t.Fatal("stale settle changed the payment")
	}
	if err := e.store.Settle(ctx, ref, token, payments.PaymentSettled(p)); err != nil {
		t.Fatalf("holder's settle: %v", err)
	}
}

// 8. the same key used by two merchants → two independent payments; no cross reads.
func TestKeysAreScopedPerMerchant(t *testing.T) {
	e := newEnv(t)
	other, otherKey := e.newMerchant("Other merchant")
	a := e.post("shared", okBody)
	b := e.postAs(otherKey, "shared", strings.Replace(okBody, "1000", "2000", 1))
	wantStatus(t, a, http.StatusCreated)
	wantStatus(t, b, http.StatusCreated) // a different body is no mismatch across merchants
	va, vb := decodeView(t, a.body), decodeView(t, b.body)
	if va.ID == vb.ID || va.MerchantOrderID == vb.MerchantOrderID {
		t.Fatalf("merchants share a payment or order id: %s %s", va.MerchantOrderID, vb.MerchantOrderID)
	}
	wantProblem(t, e.getAs(otherKey, "/payments/"+va.ID), http.StatusNotFound, "not-found")
	wantStatus(t, e.get("/payments/"+va.ID), http.StatusOK)
	mine := e.getAs(otherKey, "/payments?idempotency_key=shared")
	wantStatus(t, mine, http.StatusOK)
	if decodeView(t, mine.body).ID != vb.ID {
		t.Fatal("lookup by key crossed merchants")
	}
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE merchant_id = ?`, other.ID); n != 1 {
		t.Fatalf("other merchant has %d payments", n)
	}
	e.wantCounts(counts{payments: 2, keys: 2, completed: 2, charges: 2, chargeCalls: 2})
}

// 9. keys are case-sensitive; invalid keys are refused before anything is stored.
func TestIdempotencyKeyRules(t *testing.T) {
	e := newEnv(t)
	lower, upper := e.post("abc", okBody), e.post("ABC", okBody)
	wantStatus(t, lower, http.StatusCreated)
	wantStatus(t, upper, http.StatusCreated)
	if upper.header.Get("Idempotent-Replayed") != "" || bytes.Equal(lower.body, upper.body) {
		t.Fatal("abc and ABC were treated as one key")
	}
	wantStatus(t, e.post(strings.Repeat("k", 255), okBody), http.StatusCreated)
	e.wantCounts(counts{payments: 3, keys: 3, completed: 3, charges: 3, chargeCalls: 3})

	for name, key := range map[string]string{
		"empty":     "",
		"256 chars": strings.Repeat("k", 256),
		"tab":       "a\tb",
		"space":     "a b",
		"non-ascii": "clé",
	} {
		t.Run(name, func(t *testing.T) {
			wantProblem(t, e.post(key, okBody), http.StatusBadRequest, "invalid-idempotency-key")
		})
	}
	t.Run("missing", func(t *testing.T) {
		res, err := e.do(context.Background(), http.MethodPost, "/payments", e.apiKey, nil, okBody)
		if err != nil {
			t.Fatal(err)
		}
		wantProblem(t, res, http.StatusBadRequest, "invalid-idempotency-key")
	})
	e.wantCounts(counts{payments: 3, keys: 3, completed: 3, charges: 3, chargeCalls: 3})
}

// 10. semantically equal bodies → replay, not 422.
func TestEquivalentBodiesReplay(t *testing.T) {
	e := newEnv(t)
	first := e.post("k", okBody)
	wantStatus(t, first, http.StatusCreated)
	reordered := "{\n  \"metadata\" : { \"channel\":\"web\",\"order\":\"A-1\" },\n\t\"payment_method\":\"pm_card_ok\", \"description\":\"Order A-1\",\"currency\":\"krw\",\n  \"amount\":1000 }\n"
	second := e.post("k", reordered)
	wantStatus(t, second, http.StatusCreated)
	if !bytes.Equal(first.body, second.body) || second.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("equivalent body was not replayed: %s", second.body)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}

// 11. declines are stored and replayed as 402; validation errors are not stored.
func TestDeclinesReplayAndValidationErrorsDoNot(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ method, code string }{
		{fake.MethodDeclined, fake.DeclineCardDeclined},
		{fake.MethodInsufficientFunds, fake.DeclineInsufficientFunds},
	} {
		t.Run(tc.method, func(t *testing.T) {
			body := strings.Replace(okBody, "pm_card_ok", tc.method, 1)
			first := e.post("decline-"+tc.method, body)
			wantStatus(t, first, http.StatusPaymentRequired)
			v := decodeView(t, first.body)
			if v.Status != payments.Declined || v.DeclineCode == nil || *v.DeclineCode != tc.code {
				t.Fatalf("decline %+v", v)
			}
			again := e.post("decline-"+tc.method, body)
			wantStatus(t, again, http.StatusPaymentRequired)
			if !bytes.Equal(first.body, again.body) || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatal("decline not replayed")
			}
		})
	}
	before := e.counts()

	bad := []struct{ name, body string }{
		{"negative amount", strings.Replace(okBody, "1000", "-5", 1)},
		{"zero amount", strings.Replace(okBody, "1000", "0", 1)},
		{"fractional amount", strings.Replace(okBody, "1000", "10.5", 1)},
		{"amount as string", strings.Replace(okBody, "1000", `"1000"`, 1)},
		{"huge amount", strings.Replace(okBody, "1000", "99999999999999999999", 1)},
		{"unknown currency", strings.Replace(okBody, "KRW", "XYZ", 1)},
		{"missing currency", `{"amount": 1000, "payment_method": "pm_card_ok"}`},
		{"missing method", `{"amount": 1000, "currency": "KRW"}`},
		{"unknown field", strings.Replace(okBody, `"amount"`, `"capture": true, "amount"`, 1)},
		{"not json", `amount=1000`},
		{"two objects", okBody + okBody},
		{"array", `[1, 2]`},
		{"null", `null`},
		{"empty object", `{}`},
		{"metadata not strings", strings.Replace(okBody, `"web"}`, `1}`, 1)},
		{"control char in description", strings.Replace(okBody, "Order A-1", `Order\u0000`, 1)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, e.post("reused-after-400", tc.body), http.StatusBadRequest, "invalid-request")
		})
	}
	if got := e.counts(); got != before {
		t.Fatalf("validation errors changed state: %+v → %+v", before, got)
	}
	// The key stayed free: the fixed body runs normally.
	fixed := e.post("reused-after-400", okBody)
	wantStatus(t, fixed, http.StatusCreated)
	if fixed.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("fixed body was treated as a replay")
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	for name, key := range map[string]string{"missing": "", "wrong": "sk_notakey", "other scheme": ""} {
		t.Run(name, func(t *testing.T) {
			hdr := map[string]string{"Idempotency-Key": "k"}
			if name == "other scheme" {
				hdr["Authorization"] = "Basic " + e.apiKey
			}
			res, err := e.do(context.Background(), http.MethodPost, "/payments", key, hdr, okBody)
			if err != nil {
				t.Fatal(err)
			}
			wantProblem(t, res, http.StatusUnauthorized, "unauthorized")
		})
	}
	e.wantCounts(counts{})
}

func TestLookupEndpoints(t *testing.T) {
	e := newEnv(t)
	created := decodeView(t, e.post("k", okBody).body)
	got := e.get("/payments/" + created.ID)
	wantStatus(t, got, http.StatusOK)
	if v := decodeView(t, got.body); !reflect.DeepEqual(v, created) {
		t.Fatalf("GET differs from the creation answer: %+v vs %+v", v, created)
	}
	byKey := e.get("/payments?idempotency_key=k")
	wantStatus(t, byKey, http.StatusOK)
	if decodeView(t, byKey.body).ID != created.ID {
		t.Fatal("lookup by key found another payment")
	}
	wantProblem(t, e.get("/payments/pay_missing"), http.StatusNotFound, "not-found")
	wantProblem(t, e.get("/payments?idempotency_key=nope"), http.StatusNotFound, "not-found")
	wantProblem(t, e.get("/payments?idempotency_key=a&idempotency_key=b"), http.StatusBadRequest, "invalid-request")
	wantStatus(t, e.get("/payments"), http.StatusOK) // the listing
	wantProblem(t, e.get("/nowhere"), http.StatusNotFound, "not-found")
	wantStatus(t, e.getAs("", "/healthz"), http.StatusOK)
	wantStatus(t, e.getAs("", "/readyz"), http.StatusOK)
}

// A key whose record was purged after retention hits the payments unique
// key: 409 naming the existing payment, never a second charge.
func TestKeyReusedAfterRecordPurged(t *testing.T) {
	e := newEnv(t)
	created := decodeView(t, e.post("old", okBody).body)
	if _, err := e.db.Exec(`DELETE FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	res := e.post("old", okBody)
	wantProblem(t, res, http.StatusConflict, "idempotency-key-reused")
	if !bytes.Contains(res.body, []byte(`"payment_id":"`+created.ID+`"`)) {
		t.Fatalf("409 does not name the payment: %s", res.body)
	}
	e.wantCounts(counts{payments: 1, keys: 0, completed: 0, charges: 1, chargeCalls: 1})
}

func TestBodyTooLarge(t *testing.T) {
	e := newEnv(t)
	big := strings.Replace(okBody, "Order A-1", strings.Repeat("x", 20<<10), 1)
	wantProblem(t, e.post("big", big), http.StatusRequestEntityTooLarge, "request-too-large")
	e.wantCounts(counts{})
}
