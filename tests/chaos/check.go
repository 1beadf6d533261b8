package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"gateway/payments"
	"gateway/psp/fake/fakeserver"
)

// invariant is one rule of design §7 and what the run found against it.
type invariant struct {
	ID         int      `json:"id"`
	Name       string   `json:"name"`
	Checked    int      `json:"checked"`
	Violations int      `json:"violations"`
	Examples   []string `json:"examples,omitempty"`
	Notes      []string `json:"notes,omitempty"`
}

const maxExamples = 12

func (inv *invariant) fail(format string, args ...any) {
	inv.Violations++
	if len(inv.Examples) < maxExamples {
		inv.Examples = append(inv.Examples, fmt.Sprintf(format, args...))
	}
}

type dbPayment struct {
	MerchantID      string         `db:"merchant_id"`
	ID              string         `db:"id"`
	IdemKey         string         `db:"idem_key"`
	MerchantOrderID string         `db:"merchant_order_id"`
	Status          string         `db:"status"`
	Amount          int64          `db:"amount"`
	Currency        string         `db:"currency"`
	PaymentMethod   string         `db:"payment_method"`
	PSPReference    sql.NullString `db:"psp_reference"`
	DeclineCode     sql.NullString `db:"decline_code"`
	PSP             sql.NullString `db:"psp"`
	Attempt         int            `db:"attempt"`
	CreatedAt       time.Time      `db:"created_at"`
	UpdatedAt       time.Time      `db:"updated_at"`
}

// dbAttempt is an earlier attempt of a payment (design §16).
type dbAttempt struct {
	MerchantID      string `db:"merchant_id"`
	PaymentID       string `db:"payment_id"`
	Attempt         int    `db:"attempt"`
	PSP             string `db:"psp"`
	MerchantOrderID string `db:"merchant_order_id"`
	Outcome         string `db:"outcome"`
}

type dbKey struct {
	MerchantID     string        `db:"merchant_id"`
	IdemKey        string        `db:"idem_key"`
	State          string        `db:"state"`
	PaymentID      string        `db:"subject_id"`
	LeaseVersion   int64         `db:"lease_version"`
	ResponseStatus sql.NullInt32 `db:"response_status"`
	ResponseBody   []byte        `db:"response_body"`
}

// checker holds the evidence: the database, the PSP's ledger and what the
// clients were told.
type checker struct {
	e    *env
	w    *workload
	http *http.Client

	payments []dbPayment
	keys     []dbKey
	attempts []dbAttempt
	ledger   fakeserver.Ledger
	// accountOf names the PSP account whose ledger holds each charge's
	// order id (both, joined by "+", when two do).
	accountOf map[string]string

	merchantIdx map[string]int
	payByKey    map[recKey]dbPayment
	keyByKey    map[recKey]dbKey
	payByOrder  map[string][]dbPayment
	charges     map[string][]fakeserver.Charge // by merchant order id

	invs [7]*invariant // 1..6
}

func (c *checker) load(ctx context.Context) error {
	if err := c.e.db.SelectContext(ctx, &c.payments, `SELECT merchant_id, id, idem_key, merchant_order_id, status, amount,
    currency, payment_method, psp_reference, decline_code, psp, attempt, created_at, updated_at FROM payments`); err != nil {
		return fmt.Errorf("read payments: %w", err)
	}
	if err := c.e.db.SelectContext(ctx, &c.attempts, `SELECT merchant_id, payment_id, attempt, psp, merchant_order_id, outcome FROM payment_attempts`); err != nil {
		return fmt.Errorf("read payment attempts: %w", err)
	}
	if err := c.e.db.SelectContext(ctx, &c.keys, `SELECT merchant_id, idem_key, state, subject_id, lease_version,
    response_status, response_body FROM idempotency_keys WHERE endpoint = ?`, payments.EndpointCreatePayment); err != nil {
		return fmt.Errorf("read idempotency keys: %w", err)
	}
	l, err := c.fetchLedger(ctx)
	if err != nil {
		return err
	}
	c.ledger = l
	c.merchantIdx = map[string]int{}
	for i, m := range c.e.merchants {
		c.merchantIdx[m.ID] = i
	}
	c.payByKey = map[recKey]dbPayment{}
	c.payByOrder = map[string][]dbPayment{}
	for _, p := range c.payments {
		c.payByKey[recKey{c.idx(p.MerchantID), p.IdemKey}] = p
		c.payByOrder[p.MerchantOrderID] = append(c.payByOrder[p.MerchantOrderID], p)
	}
	c.keyByKey = map[recKey]dbKey{}
	for _, k := range c.keys {
		c.keyByKey[recKey{c.idx(k.MerchantID), k.IdemKey}] = k
	}
	c.charges = map[string][]fakeserver.Charge{}
	for _, ch := range c.ledger.Charges {
		c.charges[ch.MerchantOrderID] = append(c.charges[ch.MerchantOrderID], ch)
	}
	return nil
}

func (c *checker) idx(merchantID string) int {
	if i, ok := c.merchantIdx[merchantID]; ok {
		return i
	}
	return -100 // a merchant this run never created
}

func (c *checker) fetchLedger(ctx context.Context) (fakeserver.Ledger, error) {
	l, err := c.fetchLedgerOf(ctx, c.e.pspURL)
	if err != nil || c.e.psp2 == nil {
		c.accountOf = nil
		return l, err
	}
	// Two PSPs: one ledger of both, and which account holds each order.
	l2, err := c.fetchLedgerOf(ctx, c.e.psp2URL)
	if err != nil {
		return l, err
	}
	c.accountOf = map[string]string{}
	for _, ch := range l.Charges {
		c.accountOf[ch.MerchantOrderID] = "fake_a"
	}
	for _, ch := range l2.Charges {
		if a, both := c.accountOf[ch.MerchantOrderID]; both && a != "fake_b" {
			c.accountOf[ch.MerchantOrderID] = a + "+fake_b"
		} else {
			c.accountOf[ch.MerchantOrderID] = "fake_b"
		}
	}
	l.Charges = append(l.Charges, l2.Charges...)
	l.Refunds = append(l.Refunds, l2.Refunds...)
	l.Authorizations = append(l.Authorizations, l2.Authorizations...)
	l.Captures = append(l.Captures, l2.Captures...)
	l.Voids = append(l.Voids, l2.Voids...)
	return l, nil
}

func (c *checker) fetchLedgerOf(ctx context.Context, pspURL string) (fakeserver.Ledger, error) {
	var l fakeserver.Ledger
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, pspURL+"/admin/ledger", nil)
	res, err := c.http.Do(req)
	if err != nil {
		return l, fmt.Errorf("GET /admin/ledger: %w", err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&l); err != nil {
		return l, fmt.Errorf("GET /admin/ledger: %w", err)
	}
	return l, nil
}

// check runs every invariant; it replays keys and reads payments over HTTP,
// so the replicas must be up and the faults off.
func (c *checker) check(ctx context.Context, settled bool, inProgress, processing int) ([]*invariant, error) {
	c.invs = [7]*invariant{nil,
		{ID: 1, Name: "at most one PSP charge per (merchant, key)"},
		{ID: 2, Name: "every PSP charge is a payment with its outcome (succeeded ones succeeded)"},
		{ID: 3, Name: "nothing left IN_PROGRESS or processing; failed only when never charged"},
		{ID: 4, Name: "every answer a client received replays identically"},
		{ID: 5, Name: "no cross-merchant leaks"},
		{ID: 6, Name: "bad input gets a 4xx and changes nothing"},
	}
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	c.checkCharges()
	c.checkSettled(settled, inProgress, processing)
	if err := c.checkReplays(ctx); err != nil {
		return nil, err
	}
	if err := c.checkMerchants(ctx); err != nil {
		return nil, err
	}
	c.checkRefusals()
	invs := c.invs[1:]
	if c.e.cc != nil {
		inv, err := c.checkPrimaryOnly(ctx)
		if err != nil {
			return nil, err
		}
		invs = append(invs, inv)
	}
	events, err := c.checkEvents(ctx)
	if err != nil {
		return nil, err
	}
	return append(invs, events), nil
}

// checkCharges: invariants 1 and 2 against the ledger.
func (c *checker) checkCharges() {
	i1, i2, i3 := c.invs[1], c.invs[2], c.invs[3]
	perKey := map[recKey]int{}
	earlier := c.earlierByOrder()
	for order, chs := range c.charges {
		i1.Checked++
		if len(chs) > 1 {
			i1.fail("order %s charged %d times at the PSP", order, len(chs))
		}
		ps := c.payByOrder[order]
		if a, earlier := earlier[order]; earlier && len(ps) == 0 {
			// An attempt the gateway left as certainly not processed holds a
			// charge: a failover that could charge twice.
			i1.Checked++
			i1.fail("attempt %d of payment %s at %s (order %s) ended %s, yet the PSP holds charge %s (%s) under its order id",
				a.Attempt, a.PaymentID, a.PSP, order, a.Outcome, chs[0].Reference, chs[0].Status)
			continue
		}
		if len(ps) == 0 {
			i2.Checked++
			i2.fail("PSP charge %s (order %s, %s %d %s) belongs to no payment", chs[0].Reference, order, chs[0].Status, chs[0].Amount, chs[0].Currency)
			continue
		}
		if len(ps) > 1 {
			i1.fail("order %s is shared by %d payments", order, len(ps))
		}
		for _, p := range ps {
			perKey[recKey{c.idx(p.MerchantID), p.IdemKey}] += len(chs)
		}
		for _, ch := range chs {
			i2.Checked++
			p := ps[0]
			switch {
			case p.Status == string(payments.RequiresReview):
				i2.Notes = appendCapped(i2.Notes, fmt.Sprintf("charge %s (%s) has payment %s in requires_review (allowed, needs a person)", ch.Reference, ch.Status, p.ID))
			case p.Status != paymentStatusOf(ch.Status):
				i2.fail("PSP charge %s is %s but payment %s (merchant %s, key %q, order %s) is %s%s",
					ch.Reference, ch.Status, p.ID, p.MerchantID, p.IdemKey, order, p.Status, declineNote(p))
			case !p.PSPReference.Valid || p.PSPReference.String != ch.Reference:
				i2.fail("payment %s has psp_reference %q, the PSP's charge is %s", p.ID, p.PSPReference.String, ch.Reference)
			case p.Amount != ch.Amount || p.Currency != ch.Currency:
				i2.fail("payment %s is %d %s, its charge %s is %d %s", p.ID, p.Amount, p.Currency, ch.Reference, ch.Amount, ch.Currency)
			case c.accountOf != nil && c.accountOf[order] != p.PSP.String:
				i2.fail("payment %s names account %s, but its charge %s (order %s) is at %s", p.ID, p.PSP.String, ch.Reference, order, c.accountOf[order])
			}
			if p.Status == string(payments.Failed) {
				i3.fail("payment %s is failed, but the PSP has charge %s (%s) for its order %s", p.ID, ch.Reference, ch.Status, order)
			}
		}
	}
	for k, n := range perKey {
		if n > 1 {
			i1.fail("(merchant %d, key %q) has %d PSP charges", k.Merchant, k.Key, n)
		}
	}
	// The order id must be derived from (merchant, key): that is what makes
	// the PSP deduplicate a key's retries and keeps merchants apart.
	for _, p := range c.payments {
		i1.Checked++
		if want := payments.AttemptOrderID(p.MerchantID, p.IdemKey, max(p.Attempt, 1)); p.MerchantOrderID != want {
			i1.fail("payment %s has order id %s, want %s for its (merchant, key, attempt %d)", p.ID, p.MerchantOrderID, want, max(p.Attempt, 1))
		}
		// The other direction of invariant 2: a payment told succeeded,
		// declined or authorized must be a charge the PSP made.
		if p.Status == string(payments.Succeeded) || p.Status == string(payments.Declined) || p.Status == string(payments.RequiresCapture) {
			i2.Checked++
			if len(c.charges[p.MerchantOrderID]) == 0 {
				i2.fail("payment %s is %s but the PSP has no charge for order %s", p.ID, p.Status, p.MerchantOrderID)
			}
		}
	}
}

// paymentStatusOf is the status a payment has when its PSP charge is in
// status: an authorization is a payment requiring capture, a voided one
// (released or lapsed) a canceled payment.
func paymentStatusOf(status string) string {
	switch status {
	case "authorized":
		return string(payments.RequiresCapture)
	case "voided":
		return string(payments.Canceled)
	}
	return status
}

func declineNote(p dbPayment) string {
	if p.DeclineCode.Valid {
		return " (" + p.DeclineCode.String + ")"
	}
	return ""
}

func appendCapped(s []string, v string) []string {
	if len(s) < maxExamples {
		return append(s, v)
	}
	return s
}

// checkSettled: invariant 3.
func (c *checker) checkSettled(settled bool, inProgress, processing int) {
	i3 := c.invs[3]
	if !settled {
		i3.fail("the reconcilers did not finish within the settle timeout: %d keys IN_PROGRESS, %d payments processing", inProgress, processing)
	}
	for _, k := range c.keys {
		i3.Checked++
		if k.State != "COMPLETED" {
			i3.fail("key %q of merchant %s is %s (payment %s, lease v%d)", k.IdemKey, k.MerchantID, k.State, k.PaymentID, k.LeaseVersion)
		}
	}
	for _, p := range c.payments {
		i3.Checked++
		if p.Status == string(payments.Processing) {
			i3.fail("payment %s is still processing", p.ID)
		}
		if _, ok := c.keyByKey[recKey{c.idx(p.MerchantID), p.IdemKey}]; !ok {
			i3.fail("payment %s has no idempotency key row", p.ID)
		}
	}
}

// checkReplays: invariant 4. Every key with a payment is posted again with
// its original body: the answer must be a replay, identical to what every
// client of that key was told, and must name the key's payment in its
// current state. The replays must not charge anybody.
func (c *checker) checkReplays(ctx context.Context) error {
	i4 := c.invs[4]
	recs := c.w.order
	chargesBefore := len(c.ledger.Charges)

	type job struct {
		rec *keyRecord
		pay dbPayment
	}
	var jobs []job
	for _, rec := range recs {
		// What the clients were told must agree among themselves.
		for _, a := range rec.Answers[min(1, len(rec.Answers)):] {
			if a.Status != rec.Answers[0].Status || !bytes.Equal(a.Body, rec.Answers[0].Body) {
				i4.fail("two clients of (merchant %d, key %q) were told different things: %d %s / %d %s",
					rec.Merchant, rec.Key, rec.Answers[0].Status, rec.Answers[0].Body, a.Status, a.Body)
				break
			}
		}
		for _, a := range rec.Unexpected {
			i4.fail("a correct request of (merchant %d, key %q) got %d %s: %s", rec.Merchant, rec.Key, a.Status, a.Type, a.Body)
		}
		p, ok := c.payByKey[recKey{rec.Merchant, rec.Key}]
		if !ok {
			if len(rec.Answers) > 0 {
				i4.fail("(merchant %d, key %q) was answered %d but has no payment", rec.Merchant, rec.Key, rec.Answers[0].Status)
			}
			continue // never claimed (the client died before): posting it now would be a new payment
		}
		jobs = append(jobs, job{rec, p})
	}

	var mu sync.Mutex
	work := make(chan job)
	var wg sync.WaitGroup
	var firstErr error
	for range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(rand.Uint64(), 0))
			for j := range work {
				a, err := c.replay(ctx, r, j.rec)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					c.judgeReplay(j.rec, j.pay, a)
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	after, err := c.fetchLedger(ctx)
	if err != nil {
		return err
	}
	if len(after.Charges) != chargesBefore {
		i4.fail("replaying completed keys created %d new PSP charges", len(after.Charges)-chargesBefore)
	}
	return nil
}

// replay posts rec's original body again; faults are off, so only a
// restarting replica may need a retry.
func (c *checker) replay(ctx context.Context, r *rand.Rand, rec *keyRecord) (answer, error) {
	m := c.e.merchants[rec.Merchant]
	var last error
	for attempt := 1; attempt <= 10; attempt++ {
		base := c.e.replicas[r.IntN(len(c.e.replicas))].url()
		a, err := doPost(ctx, c.http, base, m.APIKey, rec.Key, rec.Body, 10*time.Second)
		if err == nil && !retryable(a) {
			return a, nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("%d %s", a.Status, a.Body)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			break
		}
	}
	return answer{}, fmt.Errorf("replay of (merchant %d, key %q): %v", rec.Merchant, rec.Key, last)
}

func (c *checker) judgeReplay(rec *keyRecord, p dbPayment, a answer) {
	i4, i5 := c.invs[4], c.invs[5]
	i4.Checked++
	if !final(a.Status) || !a.Replayed {
		i4.fail("replay of (merchant %d, key %q) answered %d (Idempotent-Replayed %v): %s", rec.Merchant, rec.Key, a.Status, a.Replayed, a.Body)
		return
	}
	if len(rec.Answers) > 0 {
		first := rec.Answers[0]
		if a.Status != first.Status || !bytes.Equal(a.Body, first.Body) {
			i4.fail("(merchant %d, key %q): the client was told %d %s, a replay now says %d %s",
				rec.Merchant, rec.Key, first.Status, first.Body, a.Status, a.Body)
		}
	}
	if k, ok := c.keyByKey[recKey{rec.Merchant, rec.Key}]; ok && !bytes.Equal(k.ResponseBody, a.Body) {
		i4.fail("(merchant %d, key %q): replay body differs from the stored response", rec.Merchant, rec.Key)
	}
	var v payments.View
	if err := json.Unmarshal(a.Body, &v); err != nil {
		i4.fail("(merchant %d, key %q): replay body is not a payment: %s", rec.Merchant, rec.Key, a.Body)
		return
	}
	i5.Checked++
	if v.ID != p.ID || v.MerchantOrderID != p.MerchantOrderID {
		i5.fail("(merchant %d, key %q) replays payment %s (order %s), but its payment is %s (order %s)",
			rec.Merchant, rec.Key, v.ID, v.MerchantOrderID, p.ID, p.MerchantOrderID)
	}
	if string(v.Status) != p.Status && !movedOn(v.Status, p.Status) {
		i4.fail("(merchant %d, key %q) replays status %s, payment %s is %s", rec.Merchant, rec.Key, v.Status, p.ID, p.Status)
	}
	if rec.Manual != (v.CaptureMethod == payments.CaptureManual) {
		i4.fail("(merchant %d, key %q) replays capture method %q, the client asked for manual %v", rec.Merchant, rec.Key, v.CaptureMethod, rec.Manual)
	}
	if v.Amount != rec.Amount || v.Currency != rec.Currency || v.PaymentMethod != rec.Method {
		i4.fail("(merchant %d, key %q) replays %d %s %s, the client asked for %d %s %s",
			rec.Merchant, rec.Key, v.Amount, v.Currency, v.PaymentMethod, rec.Amount, rec.Currency, rec.Method)
	}
}

// movedOn: a key that answered an authorization keeps that answer while
// later commands of their own keys capture, void or expire it.
func movedOn(answered payments.Status, now string) bool {
	if answered != payments.RequiresCapture {
		return false
	}
	switch payments.Status(now) {
	case payments.Succeeded, payments.Canceled, payments.RequiresReview:
		return true
	}
	return false
}

// checkMerchants: invariant 5.
func (c *checker) checkMerchants(ctx context.Context) error {
	i5 := c.invs[5]
	// Keys used by several merchants are several payments.
	byKey := map[string][]dbPayment{}
	for _, p := range c.payments {
		byKey[p.IdemKey] = append(byKey[p.IdemKey], p)
	}
	shared := 0
	for key, ps := range byKey {
		if len(ps) < 2 {
			continue
		}
		shared++
		ids, orders := map[string]bool{}, map[string]bool{}
		for _, p := range ps {
			i5.Checked++
			if ids[p.ID] || orders[p.MerchantOrderID] {
				i5.fail("key %q: merchants share payment %s / order %s", key, p.ID, p.MerchantOrderID)
			}
			ids[p.ID], orders[p.MerchantOrderID] = true, true
		}
	}
	i5.Notes = append(i5.Notes, fmt.Sprintf("%d keys used by more than one merchant", shared))
	if len(c.e.merchants) < 2 {
		return nil
	}
	// Reads: a sample of payments, each read by its merchant and by another.
	sample := append([]dbPayment(nil), c.payments...)
	sort.Slice(sample, func(i, j int) bool { return sample[i].ID < sample[j].ID })
	rand.New(rand.NewPCG(c.e.opts.seed, 5)).Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	sample = sample[:min(len(sample), 300)]
	for n, p := range sample {
		own := c.idx(p.MerchantID)
		if own < 0 {
			i5.fail("payment %s belongs to merchant %s, which this run never created", p.ID, p.MerchantID)
			continue
		}
		other := (own + 1 + n%(len(c.e.merchants)-1)) % len(c.e.merchants)
		base := c.e.replicas[n%len(c.e.replicas)].url()
		status, body, err := c.get(ctx, base+"/payments/"+url.PathEscape(p.ID), c.e.merchants[own].APIKey)
		if err != nil {
			return err
		}
		i5.Checked++
		var v payments.View
		if status != http.StatusOK || json.Unmarshal(body, &v) != nil || v.ID != p.ID {
			i5.fail("merchant %d reading its own payment %s got %d %s", own, p.ID, status, body)
		}
		status, body, err = c.get(ctx, base+"/payments/"+url.PathEscape(p.ID), c.e.merchants[other].APIKey)
		if err != nil {
			return err
		}
		i5.Checked++
		if status != http.StatusNotFound {
			i5.fail("merchant %d reading merchant %d's payment %s got %d %s", other, own, p.ID, status, body)
		}
		// Looking the key up as the other merchant finds the other
		// merchant's own payment with that key, or nothing.
		status, body, err = c.get(ctx, base+"/payments?idempotency_key="+url.QueryEscape(p.IdemKey), c.e.merchants[other].APIKey)
		if err != nil {
			return err
		}
		i5.Checked++
		theirs, has := c.payByKey[recKey{other, p.IdemKey}]
		switch {
		case has && (status != http.StatusOK || json.Unmarshal(body, &v) != nil || v.ID != theirs.ID):
			i5.fail("merchant %d looking up key %q got %d %s, want its own payment %s", other, p.IdemKey, status, body, theirs.ID)
		case !has && status != http.StatusNotFound:
			i5.fail("merchant %d looking up merchant %d's key %q got %d %s", other, own, p.IdemKey, status, body)
		}
	}
	return nil
}

func (c *checker) get(ctx context.Context, u, apiKey string) (int, []byte, error) {
	var last error
	for attempt := 1; attempt <= 10; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		res, err := c.http.Do(req)
		if err == nil {
			var buf bytes.Buffer
			_, err = buf.ReadFrom(res.Body)
			res.Body.Close()
			if err == nil && res.StatusCode < 500 {
				return res.StatusCode, buf.Bytes(), nil
			}
			if err == nil {
				err = fmt.Errorf("%d %s", res.StatusCode, buf.Bytes())
			}
		}
		last = err
		if !sleepCtx(ctx, 200*time.Millisecond) {
			break
		}
	}
	return 0, nil, fmt.Errorf("GET %s: %v", u, last)
}

// checkRefusals: invariant 6.
func (c *checker) checkRefusals() {
	i6 := c.invs[6]
	reused := map[recKey]bool{}
	for _, rec := range c.w.order {
		if rec.FromBad {
			reused[recKey{rec.Merchant, rec.Key}] = true
		}
	}
	anyMerchant := map[string]bool{}
	for _, p := range c.payments {
		anyMerchant[p.IdemKey] = true
	}
	for _, k := range c.keys {
		anyMerchant[k.IdemKey] = true
	}
	for _, b := range c.w.bad {
		if !b.Answered {
			continue // the run ended first
		}
		i6.Checked++
		if b.Got.Status != b.Want {
			i6.fail("%s (key %q) got %d %s, want %d", b.Kind, b.Key, b.Got.Status, b.Got.Body, b.Want)
		}
		if !b.StoreKey {
			continue
		}
		if b.Merchant < 0 {
			if anyMerchant[b.Key] {
				i6.fail("a request with a wrong API key left key %q behind", b.Key)
			}
			continue
		}
		k := recKey{b.Merchant, b.Key}
		if reused[k] {
			continue // the fixed request's payment is checked with the others
		}
		if _, ok := c.payByKey[k]; ok {
			i6.fail("%s (key %q, answered %d) left a payment behind", b.Kind, b.Key, b.Got.Status)
		}
		if _, ok := c.keyByKey[k]; ok {
			i6.fail("%s (key %q, answered %d) left an idempotency key behind", b.Kind, b.Key, b.Got.Status)
		}
	}
	// Conflicting bodies: refused with 422, and the payment is the original's.
	known := map[recKey]bool{}
	for _, rec := range c.w.order {
		known[recKey{rec.Merchant, rec.Key}] = true
		for _, a := range rec.Conflicts {
			i6.Checked++
			if a.Status != http.StatusUnprocessableEntity || a.Type != "idempotency-key-mismatch" {
				i6.fail("a conflicting body for (merchant %d, key %q) got %d %s, want 422 idempotency-key-mismatch", rec.Merchant, rec.Key, a.Status, a.Body)
			}
		}
		if p, ok := c.payByKey[recKey{rec.Merchant, rec.Key}]; ok && (p.Amount != rec.Amount || p.Currency != rec.Currency || p.PaymentMethod != rec.Method) {
			i6.fail("payment %s of (merchant %d, key %q) is %d %s %s, the original request was %d %s %s",
				p.ID, rec.Merchant, rec.Key, p.Amount, p.Currency, p.PaymentMethod, rec.Amount, rec.Currency, rec.Method)
		}
	}
	// No payment comes from anywhere but a valid request.
	for _, p := range c.payments {
		i6.Checked++
		if !known[recKey{c.idx(p.MerchantID), p.IdemKey}] {
			i6.fail("payment %s (merchant %s, key %q) matches no valid request a client sent", p.ID, p.MerchantID, p.IdemKey)
		}
	}
}

// earlierByOrder indexes the earlier attempts by their order ids.
func (c *checker) earlierByOrder() map[string]dbAttempt {
	out := make(map[string]dbAttempt, len(c.attempts))
	for _, a := range c.attempts {
		out[a.MerchantOrderID] = a
	}
	return out
}
