package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/payments"
	"gateway/psp/fake/fakeclient"
	"gateway/psp/fake/fakeserver"
)

// A real gateway over the standalone fake PSP, reached over HTTP, with one
// charge answer in five lost after the charge was made (a 500, an answer held
// past the gateway's PSP deadline, or a reset connection) and one in twenty
// refused before charging. Many clients pay at once, two per key, each
// retrying with its key until it gets a final answer. Afterwards the PSP's
// ledger and the database must agree: every charge belongs to exactly one
// payment, every payment has exactly one charge, and no (merchant, key) was
// charged twice.
func TestGatewayOverStandaloneFakePSP(t *testing.T) {
	psp, err := fakeserver.New(fakeserver.Options{
		Faults: fakeserver.Faults{
			Latency:                   fakeserver.Latency{Min: 0, Max: 5},
			ErrorBeforeCharge:         0.05,
			ErrorAfterCharge:          0.05,
			TimeoutAfterCharge:        0.05,
			DropConnectionAfterCharge: 0.10,
		},
		// Fault draws are taken in order under a lock, so the first draws,
		// which every run makes, are the same every run.
		Seed: 20261130,
	})
	if err != nil {
		t.Fatal(err)
	}
	pspSrv := httptest.NewServer(psp)
	t.Cleanup(pspSrv.Close)
	t.Cleanup(psp.Close) // runs first: releases held answers
	adapter, err := fakeclient.New(fakeclient.Config{BaseURL: pspSrv.URL})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(s *envSetup) {
		s.adapter = adapter
		// A held answer costs the gateway this deadline, then it answers 502.
		s.cfg.PSPTimeout = 300 * time.Millisecond
	})
	_, otherKey := e.newMerchant("Second merchant")

	const keysPerMerchant, clientsPerKey, maxAttempts = 20, 2, 50
	type job struct {
		apiKey, key, body string
	}
	var jobs []job
	for _, apiKey := range []string{e.apiKey, otherKey} {
		for i := range keysPerMerchant {
			method := "pm_card_ok"
			if i%5 == 4 {
				method = "pm_card_declined"
			}
			// The same key strings for both merchants: their order ids must differ.
			jobs = append(jobs, job{apiKey, fmt.Sprintf("chaos-%02d", i),
				fmt.Sprintf(`{"amount": %d, "currency": "KRW", "payment_method": %q}`, 1000+i, method)})
		}
	}

	type answer struct {
		status   int
		body     []byte
		attempts int
	}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		answers = make([][clientsPerKey]answer, len(jobs))
	)
	for j, jb := range jobs {
		for c := range clientsPerKey {
			wg.Go(func() {
				<-start
				for attempt := 1; attempt <= maxAttempts; attempt++ {
					res, err := e.do(t.Context(), http.MethodPost, "/payments", jb.apiKey,
						map[string]string{"Idempotency-Key": jb.key}, jb.body)
					if err != nil {
						t.Errorf("%s: %v", jb.key, err)
						return
					}
					switch res.status {
					case http.StatusCreated, http.StatusPaymentRequired:
						answers[j][c] = answer{res.status, res.body, attempt}
						return
					case http.StatusConflict, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
						if res.header.Get("Retry-After") == "" {
							t.Errorf("%s: %d without Retry-After", jb.key, res.status)
						}
						continue // the client's retry, same key
					default:
						t.Errorf("%s: unexpected %d %s", jb.key, res.status, res.body)
						return
					}
				}
				t.Errorf("%s: no final answer after %d attempts", jb.key, maxAttempts)
			})
		}
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	retried := 0
	for j, a := range answers {
		for c := range clientsPerKey {
			if a[c].status != a[0].status || !bytes.Equal(a[c].body, a[0].body) {
				t.Fatalf("%s: two clients of one key got different answers:\n%d %s\n%d %s",
					jobs[j].key, a[0].status, a[0].body, a[c].status, a[c].body)
			}
			if a[c].attempts > 1 {
				retried++
			}
		}
	}

	// The faults really happened, and after charging.
	stats := psp.Stats()
	lost := stats.Injected["error_after_charge"] + stats.Injected["timeout_after_charge"] + stats.Injected["drop_connection_after_charge"]
	if lost == 0 || retried == 0 {
		t.Fatalf("no answer was lost after charging (stats %+v, %d clients retried): the test proved nothing", stats, retried)
	}
	t.Logf("%d charge calls, faults %v, %d of %d clients retried", stats.ChargeCalls, stats.Injected, retried, len(jobs)*clientsPerKey)

	// The PSP's ledger, as an operator would read it.
	res, err := http.Get(pspSrv.URL + "/admin/ledger")
	if err != nil {
		t.Fatal(err)
	}
	var ledger fakeserver.Ledger
	err = json.NewDecoder(res.Body).Decode(&ledger)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}

	type row struct {
		MerchantID      string  `db:"merchant_id"`
		IdemKey         string  `db:"idem_key"`
		MerchantOrderID string  `db:"merchant_order_id"`
		Status          string  `db:"status"`
		Amount          int64   `db:"amount"`
		PSPReference    *string `db:"psp_reference"`
	}
	var rows []row
	if err := e.db.Select(&rows, `SELECT merchant_id, idem_key, merchant_order_id, status, amount, psp_reference FROM payments`); err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(jobs) {
		t.Fatalf("%d payments in the database, want %d", len(rows), len(jobs))
	}
	byOrder := map[string]row{}
	for _, r := range rows {
		if _, dup := byOrder[r.MerchantOrderID]; dup {
			t.Fatalf("two payments share order id %s", r.MerchantOrderID)
		}
		if r.MerchantOrderID != payments.MerchantOrderID(r.MerchantID, r.IdemKey) {
			t.Fatalf("payment %+v: order id is not derived from its (merchant, key)", r)
		}
		byOrder[r.MerchantOrderID] = r
	}

	// Every ledger charge belongs to exactly one payment, and no (merchant,
	// key) has two charges.
	chargesPerKey := map[[2]string]int{}
	charged := map[string]fakeserver.Charge{}
	for _, c := range ledger.Charges {
		p, ok := byOrder[c.MerchantOrderID]
		if !ok {
			t.Fatalf("ledger charge %+v belongs to no payment", c)
		}
		k := [2]string{p.MerchantID, p.IdemKey}
		if chargesPerKey[k]++; chargesPerKey[k] > 1 {
			t.Fatalf("(merchant %s, key %s) was charged twice", p.MerchantID, p.IdemKey)
		}
		charged[c.MerchantOrderID] = c
	}

	// Every payment is final and has its charge, with the PSP's reference.
	for _, p := range rows {
		c, ok := charged[p.MerchantOrderID]
		if !ok {
			t.Fatalf("payment %+v has no charge at the PSP", p)
		}
		if p.Status != c.Status || p.PSPReference == nil || *p.PSPReference != c.Reference || p.Amount != c.Amount {
			t.Fatalf("payment %+v does not match its charge %+v", p, c)
		}
		want := "succeeded"
		if strings.HasSuffix(p.IdemKey, "4") || strings.HasSuffix(p.IdemKey, "9") {
			want = "declined"
		}
		if p.Status != want {
			t.Fatalf("payment %s/%s is %s, want %s", p.MerchantID, p.IdemKey, p.Status, want)
		}
	}
	if len(ledger.Charges) != len(rows) {
		t.Fatalf("%d ledger charges for %d payments", len(ledger.Charges), len(rows))
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state <> 'COMPLETED'`); n != 0 {
		t.Fatalf("%d idempotency keys left unfinished", n)
	}
}
