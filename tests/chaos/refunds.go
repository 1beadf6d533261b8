package main

// Refund traffic, under the same faults as the payments: refund clients pick
// payments the payment clients were told succeeded and give money back, in
// full, in part, several times, and several at once with different keys,
// retrying with the same key and body after any 5xx, in-flight 409, 429 or
// network error. The fake PSP draws its faults on refund calls too (an
// error before or after the refund, a timeout after it, a dropped
// connection). Afterwards the refund invariants are checked against the
// PSP's ledger and the database.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gateway/payments"
	"gateway/psp/fake/fakeserver"
)

// Refund jobs, drawn per job; the rest refund a declined payment (a 409).
const (
	rateRefundFull       = 0.25 // one refund of the whole remainder (no amount)
	rateRefundPartial    = 0.25 // one refund of at most half
	rateRefundSeveral    = 0.20 // 2–4 refunds one after another, the last sometimes of the rest
	rateRefundConcurrent = 0.17 // 2–5 refunds at once, each of 30–60 %: some must be refused
	rateRefundBurst      = 0.08 // 2–3 copies of one refund at once (one key)

	rateRefundCrash    = 0.05 // the client gives up before a final answer
	rateRefundConflict = 0.08 // after the answer, the same key with another amount: 422
)

// refundRecord is what happened to one (merchant, refund key).
type refundRecord struct {
	Merchant  int
	PaymentID string
	Key       string
	Body      []byte
	Alt       []byte // the same command re-serialized
	Amount    int64  // asked; 0: the whole remainder

	mu         sync.Mutex
	Answers    []answer // every final answer (201, 202, 402) a client received
	Refused    []answer // 409 payment-not-refundable, 422 refund-exceeds-refundable: nothing stored
	Unexpected []answer // answers a correct client must never get
	Conflicts  []answer // answers to another body sent with this key
	Crashed    bool
	GaveUp     bool
	Abandoned  bool
	// WantRefused: the payment cannot be refunded (declined): only a 409
	// payment-not-refundable is right.
	WantRefused bool
}

func (k *refundRecord) add(f func(k *refundRecord)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f(k)
}

// refundTarget is a payment a client was told about.
type refundTarget struct {
	Merchant  int
	PaymentID string
	Amount    int64
	Currency  string
}

// refundLoad drives the refund clients and records what they were told.
type refundLoad struct {
	w       *workload
	clients int

	mu      sync.Mutex
	records map[recKey]*refundRecord
	order   []*refundRecord

	requests, retries, netErrors, noRetryAfter atomic.Int64
	jobs                                       map[string]*atomic.Int64
	byStatus                                   [600]atomic.Int64

	// captured, when set, draws a captured authorization (captures.go):
	// its Amount is the authorized amount, so that some refunds ask more
	// than was captured.
	captured func(r *rand.Rand) (refundTarget, bool)
}

var refundJobKinds = []string{"full", "partial", "several", "concurrent", "burst", "declined", "conflicts", "crashes", "waits"}

func newRefundLoad(w *workload, clients int) *refundLoad {
	rl := &refundLoad{w: w, clients: clients, records: map[recKey]*refundRecord{}, jobs: map[string]*atomic.Int64{}}
	for _, k := range refundJobKinds {
		rl.jobs[k] = &atomic.Int64{}
	}
	return rl
}

// run drives rl.clients refund clients until ctx ends.
func (rl *refundLoad) run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := range rl.clients {
		wg.Go(func() { rl.client(ctx, id) })
	}
	wg.Wait()
}

func (rl *refundLoad) client(ctx context.Context, id int) {
	// Streams apart from the payment clients': refunds do not change their draws.
	r := rand.New(rand.NewPCG(rl.w.opts.seed^0x5eed_0f_2ef0d5, uint64(id)+1))
	for seq := 0; ctx.Err() == nil; seq++ {
		key := func(n int) string { return fmt.Sprintf("r%02d-%05d-%d-%s", id, seq, n, letters(r, 6)) }
		x := r.Float64()
		want := http.StatusCreated
		if x >= rateRefundFull+rateRefundPartial+rateRefundSeveral+rateRefundConcurrent+rateRefundBurst {
			want = http.StatusPaymentRequired
		}
		t, ok := rl.pick(r, want)
		if !ok {
			rl.jobs["waits"].Add(1)
			sleepCtx(ctx, 100*time.Millisecond) // nothing to refund yet
			continue
		}
		switch {
		case x < rateRefundFull:
			rl.jobs["full"].Add(1)
			rl.drive(ctx, r, rl.newRecord(r, t, key(0), 0), 1)
		case x < rateRefundFull+rateRefundPartial:
			rl.jobs["partial"].Add(1)
			rl.drive(ctx, r, rl.newRecord(r, t, key(0), 1+r.Int64N(max(1, t.Amount/2))), 1)
		case x < rateRefundFull+rateRefundPartial+rateRefundSeveral:
			rl.jobs["several"].Add(1)
			n := 2 + r.IntN(3)
			for i := range n {
				amount := 1 + r.Int64N(max(1, t.Amount/int64(n+1)))
				if i == n-1 && r.IntN(2) == 0 {
					amount = 0 // the rest
				}
				rl.drive(ctx, r, rl.newRecord(r, t, key(i), amount), 1)
			}
		case x < rateRefundFull+rateRefundPartial+rateRefundSeveral+rateRefundConcurrent:
			rl.jobs["concurrent"].Add(1)
			n := 2 + r.IntN(4)
			var wg sync.WaitGroup
			for i := range n {
				amount := max(1, t.Amount*int64(30+r.IntN(31))/100)
				if i == 0 && r.IntN(4) == 0 {
					amount = 0
				}
				rec := rl.newRecord(r, t, key(i), amount)
				rr := rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
				wg.Go(func() { rl.drive(ctx, rr, rec, 1) })
			}
			wg.Wait()
		case x < rateRefundFull+rateRefundPartial+rateRefundSeveral+rateRefundConcurrent+rateRefundBurst:
			rl.jobs["burst"].Add(1)
			rl.drive(ctx, r, rl.newRecord(r, t, key(0), 1+r.Int64N(t.Amount)), 2+r.IntN(2))
		default:
			rl.jobs["declined"].Add(1)
			rec := rl.newRecord(r, t, key(0), 0)
			rec.WantRefused = true
			rl.drive(ctx, r, rec, 1)
		}
		sleepCtx(ctx, time.Duration(10+r.IntN(40))*time.Millisecond) // think time
	}
}

// pick draws a payment whose clients were told status (201: succeeded,
// 402: declined).
func (rl *refundLoad) pick(r *rand.Rand, status int) (refundTarget, bool) {
	w := rl.w
	if status == http.StatusCreated && rl.captured != nil && r.IntN(4) == 0 {
		if t, ok := rl.captured(r); ok {
			return t, true
		}
	}
	for range 30 {
		w.mu.Lock()
		n := len(w.order)
		var rec *keyRecord
		if n > 0 {
			rec = w.order[r.IntN(n)]
		}
		w.mu.Unlock()
		if rec == nil {
			return refundTarget{}, false
		}
		if rec.CancelByKey {
			continue // its cancellation refunds it: refunds of it here would race that
		}
		rec.mu.Lock()
		var a answer
		if len(rec.Answers) > 0 {
			a = rec.Answers[0]
		}
		rec.mu.Unlock()
		if a.Status != status {
			continue
		}
		var v payments.View
		if json.Unmarshal(a.Body, &v) != nil || v.ID == "" {
			continue
		}
		if (status == http.StatusCreated) != (v.Status == payments.Succeeded) {
			continue
		}
		return refundTarget{Merchant: rec.Merchant, PaymentID: v.ID, Amount: v.Amount, Currency: v.Currency}, true
	}
	return refundTarget{}, false
}

// newRecord registers a refund of amount (0: the rest) of t under key.
func (rl *refundLoad) newRecord(r *rand.Rand, t refundTarget, key string, amount int64) *refundRecord {
	k := &refundRecord{Merchant: t.Merchant, PaymentID: t.PaymentID, Key: key, Amount: amount}
	reason := "chaos refund " + letters(r, 6)
	rma := strconv.Itoa(r.IntN(1_000_000))
	body := map[string]any{"reason": reason, "metadata": map[string]string{"rma": rma}}
	if amount > 0 {
		body["amount"] = amount
		k.Alt = fmt.Appendf(nil, "{\"metadata\": {\"rma\": %s},\n \"amount\": %d, \"reason\": %s}", mustJSON(rma), amount, mustJSON(reason))
	} else {
		k.Alt = fmt.Appendf(nil, "{ \"metadata\": {\"rma\": %s}, \"reason\": %s }", mustJSON(rma), mustJSON(reason))
	}
	k.Body = mustJSON(body)
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.records[recKey{t.Merchant, key}] = k
	rl.order = append(rl.order, k)
	return k
}

// drive runs one refund to an answer with senders copies at once, as a
// correct client does, with the occasional crash and conflicting body.
func (rl *refundLoad) drive(ctx context.Context, r *rand.Rand, rec *refundRecord, senders int) {
	crash := senders == 1 && r.Float64() < rateRefundCrash
	if crash {
		rl.jobs["crashes"].Add(1)
	}
	var wg sync.WaitGroup
	for range senders {
		rr := rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
		wg.Go(func() { rl.send(ctx, rr, rec, crash) })
	}
	wg.Wait()
	rec.mu.Lock()
	answered := len(rec.Answers) > 0
	rec.mu.Unlock()
	if answered && r.Float64() < rateRefundConflict {
		rl.conflict(ctx, r, rec)
	}
}

func (rl *refundLoad) send(ctx context.Context, r *rand.Rand, rec *refundRecord, crash bool) {
	m := rl.w.merchants[rec.Merchant]
	first := r.IntN(len(rl.w.replicas))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			rl.retries.Add(1)
		}
		body := rec.Body
		if r.IntN(3) == 0 {
			body = rec.Alt
		}
		timeout := requestTimeout
		if crash && r.IntN(2) == 0 {
			timeout = time.Duration(2+r.IntN(200)) * time.Millisecond
		}
		a, err := rl.post(ctx, (first+attempt-1)%len(rl.w.replicas), m.APIKey, rec, body, timeout)
		if ctx.Err() != nil {
			rec.add(func(k *refundRecord) { k.Abandoned = len(k.Answers) == 0 && len(k.Refused) == 0 })
			return
		}
		if err == nil && internalError(a) {
			rec.add(func(k *refundRecord) { k.Unexpected = append(k.Unexpected, a) }) // and retried, as any 5xx
		}
		switch {
		case err == nil && final(a.Status):
			rec.add(func(k *refundRecord) { k.Answers = append(k.Answers, a) })
			return
		case err == nil && refundRefusal(a):
			rec.add(func(k *refundRecord) { k.Refused = append(k.Refused, a) })
			return
		case err == nil && !retryable(a):
			rec.add(func(k *refundRecord) { k.Unexpected = append(k.Unexpected, a) })
			return
		case crash:
			rec.add(func(k *refundRecord) { k.Crashed = true })
			return
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			rec.add(func(k *refundRecord) { k.Abandoned = len(k.Answers) == 0 && len(k.Refused) == 0 })
			return
		}
	}
	rec.add(func(k *refundRecord) { k.GaveUp = true })
}

// conflict sends another amount with rec's key: it must be refused with 422.
func (rl *refundLoad) conflict(ctx context.Context, r *rand.Rand, rec *refundRecord) {
	rl.jobs["conflicts"].Add(1)
	body := mustJSON(map[string]any{"amount": rec.Amount + 1 + r.Int64N(100)})
	m := rl.w.merchants[rec.Merchant]
	first := r.IntN(len(rl.w.replicas))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		a, err := rl.post(ctx, (first+attempt-1)%len(rl.w.replicas), m.APIKey, rec, body, requestTimeout)
		if ctx.Err() != nil {
			return
		}
		if err == nil && !retryable(a) {
			rec.add(func(k *refundRecord) { k.Conflicts = append(k.Conflicts, a) })
			return
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			return
		}
	}
}

func (rl *refundLoad) post(ctx context.Context, replica int, apiKey string, rec *refundRecord, body []byte, timeout time.Duration) (answer, error) {
	rl.requests.Add(1)
	sent := time.Now()
	a, err := postKeyed(ctx, rl.w.http, refundURL(rl.w.replicas[replica], rec.PaymentID), apiKey, rec.Key, body, timeout)
	a.Replica, a.Sent, a.Got = replica, sent, time.Now()
	if err != nil {
		rl.netErrors.Add(1)
		return a, err
	}
	if a.Status > 0 && a.Status < len(rl.byStatus) {
		rl.byStatus[a.Status].Add(1)
	}
	switch a.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if a.RetryAfter == 0 {
			rl.noRetryAfter.Add(1)
		}
	case http.StatusConflict:
		if a.Type == "request-in-flight" && a.RetryAfter == 0 {
			rl.noRetryAfter.Add(1)
		}
	}
	return a, nil
}

func refundURL(base, paymentID string) string {
	return base + "/payments/" + url.PathEscape(paymentID) + "/refunds"
}

// refundRefusal: a refusal that depends on the payment's state; nothing is
// stored and the key stays free.
func refundRefusal(a answer) bool {
	return a.Status == http.StatusConflict && a.Type == "payment-not-refundable" ||
		a.Status == http.StatusUnprocessableEntity && a.Type == "refund-exceeds-refundable"
}

// refundReport is the refund part of a run's report.
type refundReport struct {
	Clients      int              `json:"clients"`
	Requests     int64            `json:"requests"`
	Retries      int64            `json:"retries"`
	NetErrors    int64            `json:"network_errors"`
	NoRetryAfter int64            `json:"answers_without_retry_after"`
	Answers      map[string]int64 `json:"answers_by_status"`
	Jobs         map[string]int64 `json:"jobs"`
	// Keys are the refunds asked for (one key each), by how they ended for
	// their clients.
	Keys map[string]int64 `json:"keys"`
	// Rows are the refunds in the database by status; Ledger what the PSP
	// refunded.
	Rows          map[string]int   `json:"refunds_by_status"`
	Ledger        int              `json:"ledger_refunds"`
	PaymentsTouch int              `json:"payments_refunded"`
	PaymentsFull  int              `json:"payments_fully_refunded"`
	PSPCalls      int              `json:"psp_refund_calls"`
	PSPFaults     map[string]int64 `json:"psp_faults_on_refunds"`
}

func (rl *refundLoad) report(ev *refundEvidence, st fakeserver.Stats) *refundReport {
	rep := &refundReport{
		Clients: rl.clients, Requests: rl.requests.Load(), Retries: rl.retries.Load(), NetErrors: rl.netErrors.Load(),
		NoRetryAfter: rl.noRetryAfter.Load(), Answers: map[string]int64{}, Jobs: map[string]int64{},
		Keys: map[string]int64{}, Rows: map[string]int{}, PSPCalls: st.RefundCalls, PSPFaults: map[string]int64{},
	}
	for code := range rl.byStatus {
		if n := rl.byStatus[code].Load(); n > 0 {
			rep.Answers[strconv.Itoa(code)] = n
		}
	}
	if rep.NetErrors > 0 {
		rep.Answers["network error"] = rep.NetErrors
	}
	for k, n := range rl.jobs {
		if v := n.Load(); v > 0 {
			rep.Jobs[k] = v
		}
	}
	rep.Keys["asked"] = int64(len(ev.records))
	for _, rec := range ev.records {
		rec.mu.Lock()
		switch {
		case len(rec.Answers) > 0:
			rep.Keys["answered "+strconv.Itoa(rec.Answers[0].Status)]++
		case len(rec.Refused) > 0:
			rep.Keys["refused "+strconv.Itoa(rec.Refused[0].Status)]++
		case rec.Crashed:
			rep.Keys["crashed"]++
		case rec.GaveUp:
			rep.Keys["out of attempts"]++
		case rec.Abandoned:
			rep.Keys["cut by the end of the run"]++
		default:
			rep.Keys["otherwise unanswered"]++
		}
		rec.mu.Unlock()
	}
	for _, rf := range ev.refunds {
		status := rf.Status
		if rf.FailureCode.Valid {
			status += " (" + rf.FailureCode.String + ")"
		}
		rep.Rows[status]++
	}
	rep.Ledger = len(ev.ledger.Refunds)
	refunded := map[string]int64{}
	for _, lr := range ev.ledger.Refunds {
		refunded[lr.MerchantOrderID] += lr.Amount
	}
	rep.PaymentsTouch = len(refunded)
	for _, ch := range ev.ledger.Charges {
		captured := ch.Amount
		if ch.AmountCaptured > 0 {
			captured = ch.AmountCaptured // a partial capture's rest was released
		}
		if n, ok := refunded[ch.MerchantOrderID]; ok && n == captured {
			rep.PaymentsFull++
		}
	}
	for k, v := range st.InjectedRefunds {
		rep.PSPFaults[k] = int64(v)
	}
	return rep
}

func (rep *refundReport) print(line func(label, format string, args ...any)) {
	line("refund clients", "%d: jobs %s", rep.Clients, kv(rep.Jobs))
	line("refund requests", "%d, retries %d; answers %s; retryable answers without Retry-After %d",
		rep.Requests, rep.Retries, kv(rep.Answers), rep.NoRetryAfter)
	line("refund keys", "%s", kv(rep.Keys))
	line("refunds (rows)", "%s", kv(rep.Rows))
	line("refunds (ledger)", "%d, of %d payments (%d refunded in full); PSP refund calls %d, faults %s",
		rep.Ledger, rep.PaymentsTouch, rep.PaymentsFull, rep.PSPCalls, kv(rep.PSPFaults))
}
