package main

// Cancel-by-key under chaos (design §15): some of the capture clients'
// jobs are a merchant who no longer wants whatever a POST /payments key
// did or will do. The key is canceled before its request is ever sent
// (and the request arrives late), while its request runs, after its
// request timed out (the case cancel-by-key is for; the request is
// sometimes sent again afterwards), or after it was answered (an
// authorization is voided, a charge refunded in full, a decline left
// alone). Each cancellation has a key of its own, retried like any other
// command; now and then a second cancellation of the key comes with
// another own key (409), or the own key with another body (422).
// Invariant 26 judges that whatever the key did, the PSP's ledger nets to
// zero for it, and that a late duplicate never charged (capturecheck.go).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// When a cancellation by key comes, drawn per job.
const (
	rateCancelBefore  = 0.20 // before the key's request; the request comes late
	rateCancelRacing  = 0.25 // while the key's request runs
	rateCancelTimeout = 0.30 // after the key's request timed out; sometimes sent again
	// The rest: after the request was answered.

	rateCancelManual   = 0.35 // the key's payment asks for manual capture (a void, not a refund)
	rateCancelSecond   = 0.12 // another cancellation of the key with another own key: 409
	rateCancelConflict = 0.08 // the own key with another body: 422
	rateLateDuplicate  = 0.50 // after a timeout, the original request again, after the cancellation
)

const problemConflict = "conflict"

// cancelRecord is what happened to one cancellation's own key.
type cancelRecord struct {
	Merchant int
	// Key is the POST /payments key canceled; OwnKey the cancellation's own.
	Key, OwnKey string
	Reason      string // "" sends none (requested_by_customer)
	Body, Alt   []byte
	When        string // before, racing, timeout, after
	// Second: another cancellation of the key was sent (and answered) first.
	Second bool

	mu         sync.Mutex
	Answers    []answer // every final answer (200 done, 202 being carried out)
	Refused    []answer // 409 conflict: another own key canceled the key first
	Unexpected []answer
	Conflicts  []answer
	Crashed    bool
	GaveUp     bool
	Abandoned  bool
}

func (c *cancelRecord) add(f func(c *cancelRecord)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// newCancel registers a cancellation of (merchant m, key) with own key own.
func (cl *captureLoad) newCancel(r *rand.Rand, m int, key, own, when string) *cancelRecord {
	c := &cancelRecord{Merchant: m, Key: key, OwnKey: own, Reason: reason(r), When: when}
	body := map[string]any{"idempotency_key": key}
	if c.Reason != "" {
		body["cancellation_reason"] = c.Reason
		c.Alt = fmt.Appendf(nil, "{ \"cancellation_reason\": %s,\n  \"idempotency_key\": %s }", mustJSON(c.Reason), mustJSON(key))
	} else {
		c.Alt = fmt.Appendf(nil, "{\n \"idempotency_key\" : %s }", mustJSON(key))
	}
	c.Body = mustJSON(body)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.cancels = append(cl.cancels, c)
	return c
}

// cancelJob cancels one key at one moment of its life.
func (cl *captureLoad) cancelJob(ctx context.Context, r *rand.Rand, key string) {
	w := cl.w
	m := r.IntN(len(w.merchants))
	manual := r.Float64() < rateCancelManual
	own := func(n int) string { return fmt.Sprintf("%s-cbk%d-%s", key, n, letters(r, 4)) }
	var c *cancelRecord
	switch x := r.Float64(); {
	case x < rateCancelBefore:
		cl.count("cancel before")
		c = cl.newCancel(r, m, key, own(0), "before")
		cl.driveCancel(ctx, r, c)
		cl.count("late duplicates")
		late := w.newRecordOf(r, m, key, manual, true)
		w.send(ctx, r, late, false)
	case x < rateCancelBefore+rateCancelRacing:
		cl.count("cancel racing")
		rec := w.newRecordOf(r, m, key, manual, true)
		c = cl.newCancel(r, m, key, own(0), "racing")
		delay := time.Duration(r.IntN(60)) * time.Millisecond
		rr, rc := rand.New(rand.NewPCG(r.Uint64(), r.Uint64())), rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
		var wg sync.WaitGroup
		wg.Go(func() { w.send(ctx, rr, rec, false) })
		wg.Go(func() {
			if sleepCtx(ctx, delay) {
				cl.driveCancel(ctx, rc, c)
			}
		})
		wg.Wait()
	case x < rateCancelBefore+rateCancelRacing+rateCancelTimeout:
		cl.count("cancel after a timeout")
		rec := w.newRecordOf(r, m, key, manual, true)
		w.send(ctx, r, rec, true) // gives up on the first answer it does not like, or a short timeout
		c = cl.newCancel(r, m, key, own(0), "timeout")
		cl.driveCancel(ctx, r, c)
		if r.Float64() < rateLateDuplicate {
			cl.count("late duplicates")
			w.send(ctx, r, rec, false)
		}
	default:
		cl.count("cancel after the answer")
		rec := w.newRecordOf(r, m, key, manual, true)
		w.send(ctx, r, rec, false)
		c = cl.newCancel(r, m, key, own(0), "after")
		cl.driveCancel(ctx, r, c)
	}
	c.mu.Lock()
	answered := len(c.Answers) > 0
	c.mu.Unlock()
	if answered && r.Float64() < rateCancelSecond {
		cl.count("second cancellations")
		second := cl.newCancel(r, m, key, own(1), c.When)
		second.Second = true
		cl.driveCancel(ctx, r, second)
	}
}

// driveCancel runs one cancellation to an answer, as a correct client
// does, with the occasional crash and conflicting body.
func (cl *captureLoad) driveCancel(ctx context.Context, r *rand.Rand, c *cancelRecord) {
	crash := r.Float64() < rateOpCrash
	if crash {
		cl.count("crashes")
	}
	apiKey := cl.w.merchants[c.Merchant].APIKey
	first := r.IntN(len(cl.w.replicas))
	const path = "/payments/cancel_by_key"
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			cl.retries.Add(1)
		}
		body := c.Body
		if r.IntN(3) == 0 {
			body = c.Alt
		}
		timeout := requestTimeout
		if crash && r.IntN(2) == 0 {
			timeout = time.Duration(2+r.IntN(200)) * time.Millisecond
		}
		a, err := cl.post(ctx, (first+attempt-1)%len(cl.w.replicas), apiKey, path, c.OwnKey, body, timeout)
		if ctx.Err() != nil {
			c.add(func(c *cancelRecord) { c.Abandoned = len(c.Answers) == 0 && len(c.Refused) == 0 })
			return
		}
		if err == nil && internalError(a) {
			c.add(func(c *cancelRecord) { c.Unexpected = append(c.Unexpected, a) })
		}
		switch {
		case err == nil && (a.Status == http.StatusOK || a.Status == http.StatusAccepted):
			c.add(func(c *cancelRecord) { c.Answers = append(c.Answers, a) })
			if r.Float64() < rateCancelConflict {
				cl.cancelConflict(ctx, r, c)
			}
			return
		case err == nil && a.Status == http.StatusConflict && a.Type == problemConflict:
			c.add(func(c *cancelRecord) { c.Refused = append(c.Refused, a) })
			return
		case err == nil && !retryable(a):
			c.add(func(c *cancelRecord) { c.Unexpected = append(c.Unexpected, a) })
			return
		case crash:
			c.add(func(c *cancelRecord) { c.Crashed = true })
			return
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			c.add(func(c *cancelRecord) { c.Abandoned = len(c.Answers) == 0 && len(c.Refused) == 0 })
			return
		}
	}
	c.add(func(c *cancelRecord) { c.GaveUp = true })
}

// cancelConflict sends another key to cancel under c's own key: 422.
func (cl *captureLoad) cancelConflict(ctx context.Context, r *rand.Rand, c *cancelRecord) {
	cl.count("conflicts")
	body := mustJSON(map[string]any{"idempotency_key": c.Key + "-other"})
	apiKey := cl.w.merchants[c.Merchant].APIKey
	first := r.IntN(len(cl.w.replicas))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		a, err := cl.post(ctx, (first+attempt-1)%len(cl.w.replicas), apiKey, "/payments/cancel_by_key", c.OwnKey, body, requestTimeout)
		if ctx.Err() != nil {
			return
		}
		if err == nil && !retryable(a) {
			c.add(func(c *cancelRecord) { c.Conflicts = append(c.Conflicts, a) })
			return
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			return
		}
	}
}
