package main

// Manual capture under chaos (design §15), under the same faults as the
// payments: capture clients authorize payments ("capture_method":
// "manual") through the workload, so that invariants 1–6 judge them with
// every other payment, and then take or release each authorization as a
// merchant's order system does: capture it in full or in part, capture it
// with several keys at once (one may win), send one capture key from
// several senders at once, void it, race a capture with a void, or leave it
// to lapse at its capture_before (the fake PSP's authorizations are short
// here: --authorization-validity). They retry with the same key and body
// after any 5xx, in-flight 409, 429 or network error, sometimes give up
// mid-request, send another amount with a used capture key (422), and
// probe what must be refused: a void after a capture, a capture after a
// void or of a declined payment, an operation on another merchant's
// payment (404). The fake PSP draws its faults on capture and void calls
// too. Some jobs cancel by key instead (cancelbykey.go). The refund
// clients refund captured authorizations too, asking at times for more
// than was captured. Afterwards invariants 20–26 are checked against the
// PSP's ledger, the database and every answer (capturecheck.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gateway/payments"
)

// Capture jobs, drawn per authorization; the rest are left to lapse.
const (
	rateCaptureFull       = 0.25 // one capture of the whole authorization (no amount)
	rateCapturePartial    = 0.20 // one capture of a part: the rest is released
	rateCaptureConcurrent = 0.15 // 2–4 captures at once with different keys, some partial: one wins
	rateCaptureBurst      = 0.08 // 2–3 copies of one capture at once (one key)
	rateVoid              = 0.12 // a void
	rateCaptureVoidRace   = 0.10 // a capture and a void at once with different keys: one wins

	rateCancelByKeyJob = 0.30 // of the capture clients' jobs: a cancellation by key instead
	rateOpProbe        = 0.35 // once one operation won, another that must be refused
	rateOpForeign      = 0.08 // an operation with another merchant's API key: 404, nothing stored
	rateOpCrash        = 0.05 // the client gives up before a final answer
	rateOpConflict     = 0.08 // after the answer, the same key with another body: 422
)

// Problem types of the refusals that depend on a payment's state: nothing
// is stored, the key stays free.
const (
	problemNotCapturable  = "payment-not-capturable"
	problemNotCancelable  = "payment-not-cancelable"
	problemExpired        = "authorization-expired"
	problemCaptureExceeds = "capture-exceeds-authorized"
	problemNotFound       = "not-found"
)

// opRecord is what happened to one capture or void key.
type opRecord struct {
	Merchant  int // whose payment
	PaymentID string
	Kind      payments.OperationKind
	Key       string
	Body, Alt []byte
	Amount    int64  // a capture's amount_to_capture; 0: the whole authorization
	Reason    string // a void's cancellation_reason; "" sends none
	// MustRefuse, when set, are the only answers right for this
	// operation (409 or 404 problem types): it comes after another one
	// won, or it was sent as another merchant.
	MustRefuse []string
	// Sender is the merchant whose API key sent it: Merchant, or another
	// one (a cross-merchant probe).
	Sender int

	mu         sync.Mutex
	Answers    []answer // every final answer (200, 201, 202, 402) a client received
	Refused    []answer // the state refused it (409, 422, 404): nothing stored
	Unexpected []answer // answers a correct client must never get
	Conflicts  []answer // answers to another body sent with this key
	Crashed    bool
	GaveUp     bool
	Abandoned  bool
}

func (o *opRecord) add(f func(o *opRecord)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o)
}

// path is the operation's URL path.
func (o *opRecord) path() string {
	verb := "/capture"
	if o.Kind == payments.OpVoid {
		verb = "/cancel"
	}
	return "/payments/" + url.PathEscape(o.PaymentID) + verb
}

// endpoint scopes the operation's key.
func (o *opRecord) endpoint() string { return o.Kind.Endpoint() }

// won says whether a client was told the operation happened: a capture
// answered 201, a void 200.
func (o *opRecord) won() (payments.View, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, a := range o.Answers {
		var v payments.View
		if json.Unmarshal(a.Body, &v) != nil {
			continue
		}
		if o.Kind == payments.OpCapture && a.Status == http.StatusCreated && v.Status == payments.Succeeded ||
			o.Kind == payments.OpVoid && a.Status == http.StatusOK && v.Status == payments.Canceled {
			return v, true
		}
	}
	return payments.View{}, false
}

// opTarget is an authorization a client was told about.
type opTarget struct {
	Merchant  int
	PaymentID string
	Amount    int64
	Currency  string
}

// captureLoad drives the capture clients and records what they were told.
type captureLoad struct {
	w       *workload
	clients int

	mu       sync.Mutex
	ops      []*opRecord
	cancels  []*cancelRecord
	captured []refundTarget // authorizations captured, for the refund clients

	requests, retries, netErrors, noRetryAfter atomic.Int64
	jobs                                       map[string]*atomic.Int64
	byStatus                                   [600]atomic.Int64
}

var captureJobKinds = []string{"authorizations", "not authorized", "full", "partial", "concurrent", "burst", "void", "race", "lapse",
	"probes", "foreign", "conflicts", "crashes",
	"cancel before", "cancel racing", "cancel after a timeout", "cancel after the answer", "second cancellations", "late duplicates"}

func newCaptureLoad(w *workload, clients int) *captureLoad {
	cl := &captureLoad{w: w, clients: clients, jobs: map[string]*atomic.Int64{}}
	for _, k := range captureJobKinds {
		cl.jobs[k] = &atomic.Int64{}
	}
	return cl
}

func (cl *captureLoad) count(job string) { cl.jobs[job].Add(1) }

// run drives cl.clients capture clients until ctx ends.
func (cl *captureLoad) run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := range cl.clients {
		wg.Go(func() { cl.client(ctx, id) })
	}
	wg.Wait()
}

func (cl *captureLoad) client(ctx context.Context, id int) {
	// Streams apart from the other clients': captures do not change their draws.
	r := rand.New(rand.NewPCG(cl.w.opts.seed^0xca97_0e5_ca97, uint64(id)+1))
	for seq := 0; ctx.Err() == nil; seq++ {
		if r.Float64() < rateCancelByKeyJob {
			cl.cancelJob(ctx, r, fmt.Sprintf("x%02d-%05d-%s", id, seq, letters(r, 6)))
		} else {
			cl.authorizeJob(ctx, r, fmt.Sprintf("a%02d-%05d-%s", id, seq, letters(r, 6)))
		}
		sleepCtx(ctx, time.Duration(10+r.IntN(40))*time.Millisecond) // think time
	}
}

// pickCaptured draws an authorization a client was told was captured.
func (cl *captureLoad) pickCaptured(r *rand.Rand) (refundTarget, bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.captured) == 0 {
		return refundTarget{}, false
	}
	return cl.captured[r.IntN(len(cl.captured))], true
}

// authorizeJob authorizes one payment and then captures, voids or leaves it.
func (cl *captureLoad) authorizeJob(ctx context.Context, r *rand.Rand, key string) {
	w := cl.w
	m := r.IntN(len(w.merchants))
	rec := w.newRecordOf(r, m, key, true, false)
	w.drive(ctx, r, rec)
	v, status := firstAnswer(rec)
	if v.ID == "" {
		return // no answer: nothing to capture
	}
	t := opTarget{Merchant: m, PaymentID: v.ID, Amount: v.Amount, Currency: v.Currency}
	opKey := func(n int) string { return fmt.Sprintf("%s-op%d-%s", key, n, letters(r, 4)) }
	if status != http.StatusCreated || v.Status != payments.RequiresCapture {
		cl.count("not authorized") // declined, failed, or in review
		if v.Status == payments.Declined && r.Float64() < rateOpProbe {
			cl.count("probes")
			op := cl.newOp(r, t, payments.OpCapture, opKey(9), 0, "")
			op.MustRefuse = []string{problemNotCapturable}
			cl.drive(ctx, r, op, 1)
		}
		return
	}
	cl.count("authorizations")
	if len(w.merchants) > 1 && r.Float64() < rateOpForeign {
		// Another merchant names this payment: it must not exist for them.
		cl.count("foreign")
		kind := payments.OpCapture
		if r.IntN(2) == 0 {
			kind = payments.OpVoid
		}
		op := cl.newOp(r, t, kind, opKey(8), 0, "")
		op.Sender = (m + 1 + r.IntN(len(w.merchants)-1)) % len(w.merchants)
		op.MustRefuse = []string{problemNotFound}
		cl.drive(ctx, r, op, 1)
	}
	partial := func() int64 { return 1 + r.Int64N(max(1, t.Amount-1)) }
	var ops []*opRecord
	switch x := r.Float64(); {
	case x < rateCaptureFull:
		cl.count("full")
		ops = cl.together(ctx, r, cl.newOp(r, t, payments.OpCapture, opKey(0), 0, ""))
	case x < rateCaptureFull+rateCapturePartial:
		cl.count("partial")
		ops = cl.together(ctx, r, cl.newOp(r, t, payments.OpCapture, opKey(0), partial(), ""))
	case x < rateCaptureFull+rateCapturePartial+rateCaptureConcurrent:
		cl.count("concurrent")
		n := 2 + r.IntN(3)
		all := make([]*opRecord, n)
		for i := range all {
			var amount int64
			if r.IntN(2) == 0 {
				amount = partial()
			}
			all[i] = cl.newOp(r, t, payments.OpCapture, opKey(i), amount, "")
		}
		ops = cl.together(ctx, r, all...)
	case x < rateCaptureFull+rateCapturePartial+rateCaptureConcurrent+rateCaptureBurst:
		cl.count("burst")
		op := cl.newOp(r, t, payments.OpCapture, opKey(0), partial(), "")
		cl.drive(ctx, r, op, 2+r.IntN(2))
		ops = []*opRecord{op}
	case x < rateCaptureFull+rateCapturePartial+rateCaptureConcurrent+rateCaptureBurst+rateVoid:
		cl.count("void")
		ops = cl.together(ctx, r, cl.newOp(r, t, payments.OpVoid, opKey(0), 0, reason(r)))
	case x < rateCaptureFull+rateCapturePartial+rateCaptureConcurrent+rateCaptureBurst+rateVoid+rateCaptureVoidRace:
		cl.count("race")
		var amount int64
		if r.IntN(2) == 0 {
			amount = partial()
		}
		ops = cl.together(ctx, r, cl.newOp(r, t, payments.OpCapture, opKey(0), amount, ""),
			cl.newOp(r, t, payments.OpVoid, opKey(1), 0, reason(r)))
	default:
		cl.count("lapse")
		return
	}
	var winner *opRecord
	for _, op := range ops {
		if _, ok := op.won(); ok {
			winner = op
			break
		}
	}
	if winner == nil {
		return
	}
	if winner.Kind == payments.OpCapture {
		cl.mu.Lock()
		cl.captured = append(cl.captured, refundTarget{Merchant: m, PaymentID: t.PaymentID, Amount: t.Amount, Currency: t.Currency})
		cl.mu.Unlock()
	}
	if r.Float64() < rateOpProbe {
		// Once an operation won, neither another capture nor a void may.
		cl.count("probes")
		var probe *opRecord
		switch {
		case r.IntN(2) == 0:
			probe = cl.newOp(r, t, payments.OpVoid, opKey(7), 0, reason(r))
			probe.MustRefuse = []string{problemNotCancelable}
		case winner.Kind == payments.OpVoid:
			probe = cl.newOp(r, t, payments.OpCapture, opKey(7), 0, "")
			probe.MustRefuse = []string{problemNotCapturable, problemExpired}
		default:
			probe = cl.newOp(r, t, payments.OpCapture, opKey(7), 0, "")
			probe.MustRefuse = []string{problemNotCapturable}
		}
		cl.drive(ctx, r, probe, 1)
	}
}

// firstAnswer is the payment the first final answer of rec shows, and its status.
func firstAnswer(rec *keyRecord) (payments.View, int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var v payments.View
	if len(rec.Answers) == 0 || json.Unmarshal(rec.Answers[0].Body, &v) != nil {
		return payments.View{}, 0
	}
	return v, rec.Answers[0].Status
}

func reason(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		return "" // requested_by_customer
	}
	return payments.CancellationReasons[r.IntN(len(payments.CancellationReasons))]
}

// newOp registers an operation of kind on t under key.
func (cl *captureLoad) newOp(r *rand.Rand, t opTarget, kind payments.OperationKind, key string, amount int64, why string) *opRecord {
	op := &opRecord{Merchant: t.Merchant, Sender: t.Merchant, PaymentID: t.PaymentID, Kind: kind, Key: key, Amount: amount, Reason: why}
	switch {
	case kind == payments.OpCapture && amount > 0:
		op.Body = mustJSON(map[string]any{"amount_to_capture": amount})
		op.Alt = fmt.Appendf(nil, "{ \"amount_to_capture\" :\n %d }", amount)
	case kind == payments.OpVoid && why != "":
		op.Body = mustJSON(map[string]any{"cancellation_reason": why})
		op.Alt = fmt.Appendf(nil, "{\n  \"cancellation_reason\": %s }", mustJSON(why))
	default:
		op.Body, op.Alt = []byte(`{}`), []byte("{ }")
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.ops = append(cl.ops, op)
	return op
}

// together drives ops at once, one sender each.
func (cl *captureLoad) together(ctx context.Context, r *rand.Rand, ops ...*opRecord) []*opRecord {
	var wg sync.WaitGroup
	for _, op := range ops {
		rr := rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
		wg.Go(func() { cl.drive(ctx, rr, op, 1) })
	}
	wg.Wait()
	return ops
}

// drive runs one operation to an answer with senders copies at once, as a
// correct client does, with the occasional crash and conflicting body.
func (cl *captureLoad) drive(ctx context.Context, r *rand.Rand, op *opRecord, senders int) {
	crash := senders == 1 && op.MustRefuse == nil && r.Float64() < rateOpCrash
	if crash {
		cl.count("crashes")
	}
	var wg sync.WaitGroup
	for range senders {
		rr := rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
		wg.Go(func() { cl.send(ctx, rr, op, crash) })
	}
	wg.Wait()
	op.mu.Lock()
	answered := len(op.Answers) > 0
	op.mu.Unlock()
	if answered && r.Float64() < rateOpConflict {
		cl.conflict(ctx, r, op)
	}
}

func (cl *captureLoad) send(ctx context.Context, r *rand.Rand, op *opRecord, crash bool) {
	apiKey := cl.w.merchants[op.Sender].APIKey
	first := r.IntN(len(cl.w.replicas))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			cl.retries.Add(1)
		}
		body := op.Body
		if r.IntN(3) == 0 {
			body = op.Alt
		}
		timeout := requestTimeout
		if crash && r.IntN(2) == 0 {
			timeout = time.Duration(2+r.IntN(200)) * time.Millisecond
		}
		a, err := cl.post(ctx, (first+attempt-1)%len(cl.w.replicas), apiKey, op.path(), op.Key, body, timeout)
		if ctx.Err() != nil {
			op.add(func(o *opRecord) { o.Abandoned = len(o.Answers) == 0 && len(o.Refused) == 0 })
			return
		}
		if err == nil && internalError(a) {
			op.add(func(o *opRecord) { o.Unexpected = append(o.Unexpected, a) }) // and retried, as any 5xx
		}
		switch {
		case err == nil && opFinal(a.Status):
			op.add(func(o *opRecord) { o.Answers = append(o.Answers, a) })
			return
		case err == nil && opRefusal(a):
			op.add(func(o *opRecord) { o.Refused = append(o.Refused, a) })
			return
		case err == nil && !retryable(a):
			op.add(func(o *opRecord) { o.Unexpected = append(o.Unexpected, a) })
			return
		case crash:
			op.add(func(o *opRecord) { o.Crashed = true })
			return
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			op.add(func(o *opRecord) { o.Abandoned = len(o.Answers) == 0 && len(o.Refused) == 0 })
			return
		}
	}
	op.add(func(o *opRecord) { o.GaveUp = true })
}

// conflict sends another body with op's key: it must be refused with 422.
func (cl *captureLoad) conflict(ctx context.Context, r *rand.Rand, op *opRecord) {
	cl.count("conflicts")
	body := mustJSON(map[string]any{"amount_to_capture": op.Amount + 1 + r.Int64N(100)})
	if op.Kind == payments.OpVoid {
		others := slices.DeleteFunc(slices.Clone(payments.CancellationReasons), func(s string) bool {
			return s == op.Reason || op.Reason == "" && s == payments.CancelRequestedByCustomer
		})
		body = mustJSON(map[string]any{"cancellation_reason": others[r.IntN(len(others))]})
	}
	apiKey := cl.w.merchants[op.Sender].APIKey
	first := r.IntN(len(cl.w.replicas))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		a, err := cl.post(ctx, (first+attempt-1)%len(cl.w.replicas), apiKey, op.path(), op.Key, body, requestTimeout)
		if ctx.Err() != nil {
			return
		}
		if err == nil && !retryable(a) {
			op.add(func(o *opRecord) { o.Conflicts = append(o.Conflicts, a) })
			return
		}
		if !sleepCtx(ctx, backoff(r, attempt, a)) {
			return
		}
	}
}

// post sends one keyed POST of a capture client to a replica.
func (cl *captureLoad) post(ctx context.Context, replica int, apiKey, path, key string, body []byte, timeout time.Duration) (answer, error) {
	cl.requests.Add(1)
	sent := time.Now()
	a, err := postKeyed(ctx, cl.w.http, cl.w.replicas[replica]+path, apiKey, key, body, timeout)
	a.Replica, a.Sent, a.Got = replica, sent, time.Now()
	if err != nil {
		cl.netErrors.Add(1)
		return a, err
	}
	if a.Status > 0 && a.Status < len(cl.byStatus) {
		cl.byStatus[a.Status].Add(1)
	}
	switch a.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if a.RetryAfter == 0 {
			cl.noRetryAfter.Add(1)
		}
	case http.StatusConflict:
		if a.Type == "request-in-flight" && a.RetryAfter == 0 {
			cl.noRetryAfter.Add(1)
		}
	}
	return a, nil
}

// opFinal: an operation's answer, stored and replayed: 201 captured, 200
// voided, 402 refused by the PSP or beaten by another outcome, 202 in review.
func opFinal(status int) bool {
	return status == http.StatusOK || final(status)
}

// opRefusal: a refusal that depends on the payment's state (or on whose it
// is); nothing is stored and the key stays free.
func opRefusal(a answer) bool {
	switch a.Status {
	case http.StatusConflict:
		return a.Type == problemNotCapturable || a.Type == problemNotCancelable || a.Type == problemExpired
	case http.StatusUnprocessableEntity:
		return a.Type == problemCaptureExceeds
	case http.StatusNotFound:
		return a.Type == problemNotFound
	}
	return false
}

// captureReport is the capture part of a run's report.
type captureReport struct {
	Clients      int              `json:"clients"`
	Requests     int64            `json:"requests"`
	Retries      int64            `json:"retries"`
	NetErrors    int64            `json:"network_errors"`
	NoRetryAfter int64            `json:"answers_without_retry_after"`
	Answers      map[string]int64 `json:"answers_by_status"`
	Jobs         map[string]int64 `json:"jobs"`
	// Operations are the captures and voids asked for (one key each), by
	// how they ended for their clients.
	Operations map[string]int64 `json:"operations"`
	// Authorizations are the PSP's, by how they stand; Payments the
	// manual payments by status.
	Authorizations map[string]int `json:"authorizations"`
	Payments       map[string]int `json:"manual_payments"`
	Captures       int            `json:"ledger_captures"`
	Partial        int            `json:"ledger_partial_captures"`
	Voids          int            `json:"ledger_voids"`
	Cancellations  map[string]int `json:"cancellations_by_status"`
	PSPCalls       string         `json:"psp_calls"`
	PSPFaults      map[string]int `json:"psp_faults_on_captures_and_voids"`
}

func (cl *captureLoad) report(ev *captureEvidence) *captureReport {
	rep := &captureReport{Clients: cl.clients, Requests: cl.requests.Load(), Retries: cl.retries.Load(), NetErrors: cl.netErrors.Load(),
		NoRetryAfter: cl.noRetryAfter.Load(), Answers: map[string]int64{}, Jobs: map[string]int64{}, Operations: map[string]int64{},
		Authorizations: map[string]int{}, Payments: map[string]int{}, Cancellations: map[string]int{}, PSPFaults: map[string]int{}}
	for code := range cl.byStatus {
		if n := cl.byStatus[code].Load(); n > 0 {
			rep.Answers[strconv.Itoa(code)] = n
		}
	}
	if rep.NetErrors > 0 {
		rep.Answers["network error"] = rep.NetErrors
	}
	for k, n := range cl.jobs {
		if v := n.Load(); v > 0 {
			rep.Jobs[k] = v
		}
	}
	for _, op := range ev.ops {
		op.mu.Lock()
		kind := string(op.Kind)
		switch {
		case len(op.Answers) > 0:
			rep.Operations[kind+" answered "+strconv.Itoa(op.Answers[0].Status)]++
		case len(op.Refused) > 0:
			rep.Operations[kind+" refused "+op.Refused[0].Type]++
		case op.Crashed:
			rep.Operations[kind+" crashed"]++
		case op.GaveUp:
			rep.Operations[kind+" out of attempts"]++
		case op.Abandoned:
			rep.Operations[kind+" cut by the end of the run"]++
		default:
			rep.Operations[kind+" otherwise unanswered"]++
		}
		op.mu.Unlock()
	}
	for _, a := range ev.ledger.Authorizations {
		status := a.Status
		switch {
		case a.Lapsed:
			status = "lapsed"
		case a.Status == "succeeded" && a.AmountCaptured < a.Amount:
			status = "partially captured"
		case a.Status == "succeeded":
			status = "captured"
		}
		rep.Authorizations[status]++
	}
	for _, p := range ev.payments {
		if p.CaptureMethod == string(payments.CaptureManual) {
			status := p.Status
			if p.CancellationReason.Valid {
				status += " (" + p.CancellationReason.String + ")"
			}
			rep.Payments[status]++
		}
	}
	rep.Captures, rep.Voids = len(ev.ledger.Captures), len(ev.ledger.Voids)
	for _, a := range ev.ledger.Authorizations {
		if a.Status == "succeeded" && a.AmountCaptured < a.Amount {
			rep.Partial++
		}
	}
	for _, kc := range ev.cancellations {
		rep.Cancellations[kc.Status]++
	}
	rep.PSPCalls = fmt.Sprintf("capture %d, void %d", ev.stats.CaptureCalls, ev.stats.VoidCalls)
	for k, v := range ev.stats.InjectedCaptures {
		rep.PSPFaults["capture "+k] += v
	}
	for k, v := range ev.stats.InjectedVoids {
		rep.PSPFaults["void "+k] += v
	}
	return rep
}

func (rep *captureReport) print(line func(label, format string, args ...any)) {
	line("capture clients", "%d: jobs %s", rep.Clients, kv(rep.Jobs))
	line("capture requests", "%d, retries %d; answers %s; retryable answers without Retry-After %d",
		rep.Requests, rep.Retries, kv(rep.Answers), rep.NoRetryAfter)
	line("captures and voids", "%s", kv(rep.Operations))
	line("authorizations (ledger)", "%s; %d captures (%d partial), %d voids; PSP calls %s, faults %s",
		kv(rep.Authorizations), rep.Captures, rep.Partial, rep.Voids, rep.PSPCalls, kv(rep.PSPFaults))
	line("manual payments", "%s", kv(rep.Payments))
	line("cancellations by key", "%s", kv(rep.Cancellations))
}
