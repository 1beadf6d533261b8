package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gateway/payments"
)

// Client behaviour. The rates are per job.
const (
	rateBad       = 0.03 // a body or key the gateway must refuse with 400
	rateUnauth    = 0.01 // a wrong API key: 401
	rateShared    = 0.12 // the same key string for 2–3 merchants at once
	rateBurst     = 0.08 // 2–4 copies of the first request at once
	rateCrash     = 0.08 // the client gives up before a final answer
	rateConflict  = 0.08 // after the answer, the same key with another body
	rateMidflight = 0.15 // on an answer proving the key is claimed, a conflicting body at once
	rateCase      = 0.03 // the same key with its letters' case swapped: another key

	maxAttempts    = 30
	requestTimeout = 6 * time.Second
	maxBackoff     = 2 * time.Second
)

// answer is one HTTP answer a client received.
type answer struct {
	Status     int
	Body       []byte
	Replayed   bool
	Type       string        // problem type (without /problems/), for problem answers
	RetryAfter time.Duration // the Retry-After header, when sent

	// Set for the workload's requests: which replica answered, and when
	// the request went out and its answer came back.
	Replica   int
	Sent, Got time.Time
}

// keyRecord is what happened to one (merchant, key) sent with a valid body.
type keyRecord struct {
	Merchant int
	Key      string
	Body     []byte // canonical JSON
	Alt      []byte // the same command re-serialized (other key order, spacing, currency case)
	Amount   int64
	Currency string
	Method   string

	mu         sync.Mutex
	Answers    []answer // every final answer (201, 402, 202) a client received
	Unexpected []answer // answers a correct client must never get
	Crashed    bool     // a client gave up on purpose before a final answer
	GaveUp     bool     // a client ran out of attempts
	Abandoned  bool     // the run ended before a final answer
	Conflicts  []answer // final answers to conflicting bodies sent with this key
	FromBad    bool     // the key was first sent with an invalid body (400)
	CaseTwin   bool     // the key is another one's with the letters' case swapped
	// Manual: sent with "capture_method": "manual" (captures.go).
	Manual bool
	// CancelByKey: a cancellation by key names this key (cancelbykey.go);
	// Canceled holds the 409 canceled-by-key answers its requests got.
	CancelByKey bool
	Canceled    []answer
}

func (k *keyRecord) add(f func(k *keyRecord)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f(k)
}

// badRecord is a request the gateway must refuse without storing anything.
type badRecord struct {
	Merchant int // -1: a wrong API key
	Key      string
	Kind     string
	Want     int
	Got      answer
	Answered bool
	StoreKey bool // whether the key is valid and can be looked for in the database
}

type recKey struct {
	Merchant int
	Key      string
}

// workload drives the clients and records what they were told.
type workload struct {
	opts      options
	merchants []merchant
	replicas  []string // base URLs
	http      *http.Client

	mu      sync.Mutex
	records map[recKey]*keyRecord
	order   []*keyRecord
	bad     []*badRecord

	requests, retries, netErrors          atomic.Int64
	jobs, bursts, shared, crashes, giveUp atomic.Int64
	conflicts, midflight, abandoned       atomic.Int64
	noRetryAfter                          atomic.Int64 // 429, 502, 503, 504 and 409 request-in-flight without Retry-After
	byStatus                              [600]atomic.Int64

	traceMu sync.Mutex
	trace   []traced // every request, in the order the answers came
}

// traced is one request of the workload: to which replica, when, and how
// it was answered (Status 0: a network error).
type traced struct {
	Replica   int
	Sent, Got time.Time
	Status    int
	Replayed  bool
}

// traced returns a copy of the requests so far.
func (w *workload) traced() []traced {
	w.traceMu.Lock()
	defer w.traceMu.Unlock()
	return append([]traced(nil), w.trace...)
}

func newWorkload(o options, merchants []merchant, replicas []string) *workload {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        4 * o.clients,
		MaxIdleConnsPerHost: 2 * o.clients,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &workload{opts: o, merchants: merchants, replicas: replicas,
		http: &http.Client{Transport: tr}, records: map[recKey]*keyRecord{}}
}

// run drives o.clients clients until ctx ends.
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := range w.opts.clients {
		wg.Go(func() { w.client(ctx, id) })
	}
	wg.Wait()
	w.http.CloseIdleConnections()
}

func (w *workload) client(ctx context.Context, id int) {
	r := rand.New(rand.NewPCG(w.opts.seed, uint64(id)+1))
	for seq := 0; ctx.Err() == nil; seq++ {
		w.jobs.Add(1)
		switch x := r.Float64(); {
		case x < rateBad:
			w.badJob(ctx, r, fmt.Sprintf("c%02d-%05d-%s", id, seq, letters(r, 6)))
		case x < rateBad+rateUnauth:
			w.unauthJob(ctx, r, fmt.Sprintf("u%02d-%05d-%s", id, seq, letters(r, 6)))
		default:
			w.payJob(ctx, r, fmt.Sprintf("k%02d-%05d-%s", id, seq, letters(r, 6)))
		}
		sleepCtx(ctx, time.Duration(5+r.IntN(35))*time.Millisecond) // think time
	}
}

// letters is a random mixed-case suffix: keys are case-sensitive.
func letters(r *rand.Rand, n int) string {
	const abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, n)
	for i := range b {
		b[i] = abc[r.IntN(len(abc))]
	}
	return string(b)
}

func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

var (
	currencies = []string{"KRW", "USD", "EUR", "JPY"}
	methods    = []string{"pm_card_ok", "pm_card_ok", "pm_card_ok", "pm_card_ok", "pm_card_ok", "pm_card_ok", "pm_card_ok", "pm_card_ok", "pm_card_declined", "pm_card_insufficient_funds"}
)

// newRecord registers (merchant, key) with a fresh random body.
func (w *workload) newRecord(r *rand.Rand, m int, key string) *keyRecord {
	return w.newRecordOf(r, m, key, false, false)
}

// newRecordOf registers (merchant, key) with a fresh random body, asking
// for manual capture when manual is set; cancelByKey marks a key a
// cancellation by key names.
func (w *workload) newRecordOf(r *rand.Rand, m int, key string, manual, cancelByKey bool) *keyRecord {
	k := &keyRecord{
		Merchant:    m,
		Key:         key,
		Amount:      100 + r.Int64N(500_000),
		Currency:    currencies[r.IntN(len(currencies))],
		Method:      methods[r.IntN(len(methods))],
		Manual:      manual,
		CancelByKey: cancelByKey,
	}
	desc := "chaos order " + letters(r, 8)
	order := "A-" + strconv.Itoa(r.IntN(1_000_000))
	body := map[string]any{ // encoding/json sorts the keys
		"amount": k.Amount, "currency": k.Currency, "payment_method": k.Method,
		"description": desc, "metadata": map[string]string{"order": order},
	}
	capture := ""
	if manual {
		body["capture_method"] = string(payments.CaptureManual)
		capture = `"capture_method": "manual", `
	}
	k.Body = mustJSON(body)
	k.Alt = fmt.Appendf(nil, "{ \"payment_method\": %s,\n  \"metadata\": {\"order\": %s},\n  %s\"currency\": %s, \"description\": %s, \"amount\": %d }",
		mustJSON(k.Method), mustJSON(order), capture, mustJSON(strings.ToLower(k.Currency)), mustJSON(desc), k.Amount)
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.records[recKey{m, key}]; ok {
		return old // cannot happen: keys carry their client and sequence number
	}
	w.records[recKey{m, key}] = k
	w.order = append(w.order, k)
	return k
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// payJob pays with one key, sometimes for several merchants at once.
func (w *workload) payJob(ctx context.Context, r *rand.Rand, key string) {
	ms := []int{r.IntN(len(w.merchants))}
	if len(w.merchants) > 1 && r.Float64() < rateShared {
		w.shared.Add(1)
		perm := r.Perm(len(w.merchants))
		ms = perm[:2+r.IntN(len(w.merchants)-1)]
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		rec := w.newRecord(r, m, key)
		rr := rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
		wg.Go(func() { w.drive(ctx, rr, rec) })
	}
	wg.Wait()
}

// drive runs one record to a final answer, as a correct client would, with
// the occasional burst, crash and conflicting body.
func (w *workload) drive(ctx context.Context, r *rand.Rand, rec *keyRecord) {
	senders, crash := 1, false
	switch x := r.Float64(); {
	case x < rateBurst:
		senders = 2 + r.IntN(3)
		w.bursts.Add(1)
	case x < rateBurst+rateCrash:
		crash = true
		w.crashes.Add(1)
	}
	var wg sync.WaitGroup
	for range senders {
		rr := rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
		wg.Go(func() { w.send(ctx, rr, rec, crash) })
	}
	wg.Wait()
	rec.mu.Lock()
	answered := len(rec.Answers) > 0
	rec.mu.Unlock()
	if answered && r.Float64() < rateConflict {
		w.conflict(ctx, r, rec)
	}
	if !rec.CaseTwin && r.Float64() < rateCase {
		// Keys are case-sensitive: this is another payment.
		twin := w.newRecord(r, rec.Merchant, swapCase(rec.Key))
		twin.CaseTwin = true
		w.drive(ctx, r, twin)
	}
}

// send posts rec until it gets a final answer, retrying with the same key
// and body after network errors, 5xx, 409 and 429.
func (w *workload) send(ctx context.Context, r *rand.Rand, rec *keyRecord, crash bool) {
	m := w.merchants[rec.Merchant]
	first := r.IntN(len(w.replicas))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			w.retries.Add(1)
		}
		replica := (first + attempt - 1) % len(w.replicas) // a retry goes to the next replica
		body := rec.Body
		if r.IntN(3) == 0 {
			body = rec.Alt // a client library re-serializing: the same command
		}
		timeout := requestTimeout
		if crash && r.IntN(2) == 0 {
			timeout = time.Duration(2+r.IntN(200)) * time.Millisecond // the client dies mid-request
		}
		a, err := w.post(ctx, replica, m.APIKey, rec.Key, body, timeout)
		if ctx.Err() != nil {
			rec.add(func(k *keyRecord) { k.Abandoned = len(k.Answers) == 0 })
			return
		}
		if err == nil && internalError(a) {
			// Retried like any 5xx, but a fault of the network or the
			// database is a 502/503 with Retry-After, never a 500.
			rec.add(func(k *keyRecord) { k.Unexpected = append(k.Unexpected, a) })
		}
		if err == nil && final(a.Status) {
			rec.add(func(k *keyRecord) { k.Answers = append(k.Answers, a) })
			return
		}
		if err == nil && rec.CancelByKey && a.Type == "canceled-by-key" {
			// The key was canceled before anything claimed it: this
			// answer is final, and nothing was charged.
			rec.add(func(k *keyRecord) { k.Canceled = append(k.Canceled, a) })
			return
		}
		if err == nil && !retryable(a) {
			rec.add(func(k *keyRecord) { k.Unexpected = append(k.Unexpected, a) })
			return
		}
		if crash {
			rec.add(func(k *keyRecord) { k.Crashed = true })
			return
		}
		if err == nil && provesClaim(a) && r.Float64() < rateMidflight {
			w.midflight.Add(1)
			w.conflict(ctx, r, rec)
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			rec.add(func(k *keyRecord) { k.Abandoned = len(k.Answers) == 0 })
			return
		}
	}
	w.giveUp.Add(1)
	rec.add(func(k *keyRecord) { k.GaveUp = true })
}

// conflict sends another body with rec's key: it must be refused with 422.
func (w *workload) conflict(ctx context.Context, r *rand.Rand, rec *keyRecord) {
	w.conflicts.Add(1)
	body := mustJSON(map[string]any{
		"amount": rec.Amount + 1 + r.Int64N(1000), "currency": rec.Currency, "payment_method": rec.Method,
	})
	m := w.merchants[rec.Merchant]
	first := r.IntN(len(w.replicas))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		a, err := w.post(ctx, (first+attempt-1)%len(w.replicas), m.APIKey, rec.Key, body, requestTimeout)
		if ctx.Err() != nil {
			return
		}
		if err == nil && !retryable(a) {
			rec.add(func(k *keyRecord) { k.Conflicts = append(k.Conflicts, a) })
			return
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			return
		}
	}
}

// Invalid requests: each must get 400 and leave nothing behind.
var badBodies = []struct{ kind, body string }{
	{"negative amount", `{"amount": -5, "currency": "KRW", "payment_method": "pm_card_ok"}`},
	{"unknown field", `{"amount": 100, "currency": "KRW", "payment_method": "pm_card_ok", "bogus": 1}`},
	{"unknown currency", `{"amount": 100, "currency": "ZZZ", "payment_method": "pm_card_ok"}`},
	{"truncated JSON", `{"amount": 100, "currency": "KRW",`},
	{"missing method", `{"amount": 100, "currency": "KRW"}`},
	{"string amount", `{"amount": "100", "currency": "KRW", "payment_method": "pm_card_ok"}`},
}

func (w *workload) badJob(ctx context.Context, r *rand.Rand, key string) {
	m := r.IntN(len(w.merchants))
	b := &badRecord{Merchant: m, Key: key, Want: http.StatusBadRequest, StoreKey: true}
	body := []byte(`{"amount": 100, "currency": "KRW", "payment_method": "pm_card_ok"}`)
	if r.IntN(5) == 0 {
		b.Kind, b.StoreKey = "invalid key", false
		b.Key = key + " with spaces"
	} else {
		bb := badBodies[r.IntN(len(badBodies))]
		b.Kind, body = bb.kind, []byte(bb.body)
	}
	w.refused(ctx, r, b, w.merchants[m].APIKey, body)
	// The key stays free after a 400: a fixed request with it is a new payment.
	if b.StoreKey && b.Answered && b.Got.Status == http.StatusBadRequest && r.IntN(2) == 0 {
		rec := w.newRecord(r, m, key)
		rec.FromBad = true
		w.drive(ctx, r, rec)
	}
}

func (w *workload) unauthJob(ctx context.Context, r *rand.Rand, key string) {
	b := &badRecord{Merchant: -1, Key: key, Kind: "wrong API key", Want: http.StatusUnauthorized, StoreKey: true}
	w.refused(ctx, r, b, "sk_"+letters(r, 32), []byte(`{"amount": 100, "currency": "KRW", "payment_method": "pm_card_ok"}`))
}

// refused sends a request that must be refused, retrying transient failures.
func (w *workload) refused(ctx context.Context, r *rand.Rand, b *badRecord, apiKey string, body []byte) {
	first := r.IntN(len(w.replicas))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		a, err := w.post(ctx, (first+attempt-1)%len(w.replicas), apiKey, b.Key, body, requestTimeout)
		if ctx.Err() != nil {
			break
		}
		if err == nil && !retryable(a) {
			b.Got, b.Answered = a, true
			break
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			break
		}
	}
	w.mu.Lock()
	w.bad = append(w.bad, b)
	w.mu.Unlock()
}

// post sends POST /payments to a replica: the client picks a random one
// first (the load balancer) and the next one on each retry.
func (w *workload) post(ctx context.Context, replica int, apiKey, key string, body []byte, timeout time.Duration) (answer, error) {
	base := w.replicas[replica]
	w.requests.Add(1)
	sent := time.Now()
	a, err := doPost(ctx, w.http, base, apiKey, key, body, timeout)
	a.Replica, a.Sent, a.Got = replica, sent, time.Now()
	w.traceMu.Lock()
	w.trace = append(w.trace, traced{Replica: replica, Sent: sent, Got: a.Got, Status: a.Status, Replayed: a.Replayed})
	w.traceMu.Unlock()
	if err != nil {
		w.netErrors.Add(1)
		return a, err
	}
	if a.Status > 0 && a.Status < len(w.byStatus) {
		w.byStatus[a.Status].Add(1)
	}
	switch a.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if a.RetryAfter == 0 {
			w.noRetryAfter.Add(1)
		}
	case http.StatusConflict:
		// Only the 409 to retry promises Retry-After; a key reused past its
		// retention or canceled by key is final.
		if a.Type == "request-in-flight" && a.RetryAfter == 0 {
			w.noRetryAfter.Add(1)
		}
	}
	return a, nil
}

func doPost(ctx context.Context, c *http.Client, base, apiKey, key string, body []byte, timeout time.Duration) (answer, error) {
	return postKeyed(ctx, c, base+"/payments", apiKey, key, body, timeout)
}

// postKeyed sends one POST with an Idempotency-Key and reads its answer.
func postKeyed(ctx context.Context, c *http.Client, url, apiKey, key string, body []byte, timeout time.Duration) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{Status: res.StatusCode, Body: b, Replayed: res.Header.Get("Idempotent-Replayed") == "true"}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "application/problem+json" {
		var p struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(b, &p)
		a.Type = strings.TrimPrefix(p.Type, "/problems/")
	}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s >= 0 {
		a.RetryAfter = time.Duration(s) * time.Second
	}
	return a, nil
}

// final: the payment's answer, stored and replayed.
func final(status int) bool {
	return status == http.StatusCreated || status == http.StatusPaymentRequired || status == http.StatusAccepted
}

// retryable: what a correct client retries with the same key and body.
func retryable(a answer) bool {
	switch {
	case a.Status == 0, a.Status >= 500, a.Status == http.StatusTooManyRequests:
		return true
	case a.Status == http.StatusConflict:
		return a.Type == "request-in-flight"
	}
	return false
}

// internalError: an answer no fault outside the gateway explains (500): the
// client retries it, and the run counts it as a violation.
func internalError(a answer) bool {
	return a.Status == http.StatusInternalServerError || a.Type == "internal"
}

// provesClaim: an answer only a request that found its key claimed gets.
func provesClaim(a answer) bool {
	switch a.Type {
	case "request-in-flight", "psp-outcome-unknown", "psp-unavailable":
		return true
	}
	return false
}

// backoff is exponential with jitter, and at least the Retry-After asked for (capped).
func backoff(r *rand.Rand, attempt int, a answer) time.Duration {
	d := max(50*time.Millisecond<<min(attempt-1, 5), a.RetryAfter)
	d = min(d, maxBackoff)
	return d/2 + time.Duration(r.Int64N(int64(d)))
}
