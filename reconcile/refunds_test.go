package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"gateway/errs"
	"gateway/listings"
	"gateway/merchants"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
	"gateway/review"
)

// The refund tests: the same exactly-once proof as charges, and the
// invariant that a payment's pending, succeeded and in-review refunds never
// add up to more than it.

// paid creates a succeeded payment of amount KRW.
func (e *env) paid(key string, amount int64) payments.Payment {
	e.t.Helper()
	req := e.request(key)
	req.Amount.Minor = amount
	out, err := e.svc.Create(context.Background(), req)
	if err != nil || out.Response.Status != http.StatusCreated {
		e.t.Fatalf("pay: %+v %v", out, err)
	}
	p, err := e.store.Payment(context.Background(), e.merch.ID, out.SubjectID)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) refund(p payments.Payment, key string, amount *int64) (payments.Outcome, error) {
	return e.svc.CreateRefund(context.Background(), payments.RefundRequest{
		MerchantID: e.merch.ID, PaymentID: p.ID, IdempotencyKey: key, Amount: amount, Reason: "customer asked",
	})
}

func amt(n int64) *int64 { return &n }

// ledgerRefunded is what the PSP's ledger paid back for an order.
func (e *env) ledgerRefunded(p payments.Payment) int64 {
	var sum int64
	for _, r := range e.psp.Refunds() {
		if r.MerchantOrderID == p.MerchantOrderID && r.Status != psp.RefundDeclined {
			sum += r.Amount
		}
	}
	return sum
}

func (e *env) checkAmounts(p payments.Payment) payments.Payment {
	e.t.Helper()
	got, err := e.store.Payment(context.Background(), e.merch.ID, p.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	var reserved, refunded int64
	if err := e.db.QueryRow(`SELECT COALESCE(SUM(amount), 0), COALESCE(SUM(IF(status = 'succeeded', amount, 0)), 0)
FROM refunds WHERE payment_id = ? AND status IN ('pending', 'succeeded', 'requires_review')`, p.ID).Scan(&reserved, &refunded); err != nil {
		e.t.Fatal(err)
	}
	if got.AmountReserved != reserved || got.AmountRefunded != refunded || reserved > got.Amount.Minor {
		e.t.Fatalf("payment reserves %d, refunded %d; its refunds hold %d, succeeded %d; amount %d",
			got.AmountReserved, got.AmountRefunded, reserved, refunded, got.Amount.Minor)
	}
	if ledger := e.ledgerRefunded(p); ledger != refunded {
		e.t.Fatalf("the PSP paid back %d, the gateway recorded %d", ledger, refunded)
	}
	return got
}

// 1. 50 concurrent refunds, each with its own key, each for 30 % of a
// payment: at most 3 succeed; the rest are refused and store nothing.
func TestConcurrentRefundsNeverExceedThePayment(t *testing.T) {
	e := newEnv(t)
	p := e.paid("pay", 1000)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		codes   = map[string]int{}
		refused string
	)
	for i := range 50 {
		wg.Go(func() {
			<-start
			out, err := e.refund(p, fmt.Sprintf("r%02d", i), amt(300))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				codes[fmt.Sprint(out.Response.Status)]++
			default:
				codes[string(errs.CodeOf(err))]++
				refused = fmt.Sprintf("r%02d", i)
			}
		})
	}
	close(start)
	wg.Wait()
	if codes["201"] != 3 || codes[string(errs.CodeRefundExceeds)] != 47 {
		t.Fatalf("answers %v, want 3 refunds and 47 refusals", codes)
	}
	if n := e.count(`SELECT COUNT(*) FROM refunds`); n != 3 {
		t.Fatalf("%d refunds stored", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE endpoint = ?`, payments.EndpointCreateRefund); n != 3 {
		t.Fatalf("%d refund keys stored: a refusal kept its key", n)
	}
	got := e.checkAmounts(p)
	if got.AmountRefunded != 900 || e.ledgerRefunded(p) != 900 {
		t.Fatalf("refunded %d", got.AmountRefunded)
	}
	// A refused key was not used up: it refunds what is left.
	out, err := e.refund(p, refused, amt(100))
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("the rest: %+v %v", out, err)
	}
	if got := e.checkAmounts(p); got.AmountRefunded != 1000 {
		t.Fatalf("refunded %d after the rest", got.AmountRefunded)
	}
	if v, err := e.svc.Payment(context.Background(), e.merch.ID, p.ID); err != nil || !payments.ToView(v).Refunded {
		t.Fatalf("a fully refunded payment does not say so: %+v %v", v, err)
	}
}

// 2. The same key and body replays byte for byte; another body is 422.
// 3. 50 concurrent requests with one key make one refund.
func TestRefundKeyRules(t *testing.T) {
	e := newEnv(t)
	p := e.paid("pay", 1000)
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		bodies = make(chan []byte, 50)
	)
	for range 50 {
		wg.Go(func() {
			<-start
			out, err := e.refund(p, "same", amt(400))
			if err != nil {
				if errs.CodeOf(err) != errs.CodeInFlight {
					t.Errorf("duplicate: %v", err)
				}
				return
			}
			bodies <- out.Response.Body
		})
	}
	close(start)
	wg.Wait()
	close(bodies)
	var first []byte
	for b := range bodies {
		if first == nil {
			first = b
		} else if !bytes.Equal(first, b) {
			t.Fatalf("answers differ:\n%s\n%s", first, b)
		}
	}
	if e.psp.RefundCalls() != 1 || len(e.psp.Refunds()) != 1 || e.count(`SELECT COUNT(*) FROM refunds`) != 1 {
		t.Fatalf("%d refund calls, %d at the PSP", e.psp.RefundCalls(), len(e.psp.Refunds()))
	}
	again, err := e.refund(p, "same", amt(400))
	if err != nil || !again.Replayed || !bytes.Equal(again.Response.Body, first) {
		t.Fatalf("replay: %+v %v", again, err)
	}
	if _, err := e.refund(p, "same", amt(401)); errs.CodeOf(err) != errs.CodeKeyMismatch {
		t.Fatalf("another body: %v", err)
	}
	// The same key string on POST /payments is another key.
	if _, err := e.svc.Create(context.Background(), e.request("same")); err != nil {
		t.Fatalf("a payment key equal to a refund key: %v", err)
	}
	e.checkAmounts(p)
}

// 4. The PSP refunds and the answer is lost: the retry looks up first,
// settles, and nothing is paid twice.
func TestLostRefundAnswerIsLookedUpFirst(t *testing.T) {
	e := newEnv(t)
	p := e.paid("pay", 1000)
	e.psp.FailNextRefunds(fake.FaultUnknownAfterCharge, 1)
	if _, err := e.refund(p, "r", amt(250)); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("lost answer: %v", err)
	}
	out, err := e.refund(p, "r", amt(250))
	if err != nil || out.Response.Status != http.StatusCreated || out.Replayed {
		t.Fatalf("retry: %+v %v", out, err)
	}
	if len(e.psp.Refunds()) != 1 || e.psp.RefundCalls() != 1 {
		t.Fatalf("%d refunds at the PSP from %d calls: the retry sent again", len(e.psp.Refunds()), e.psp.RefundCalls())
	}
	e.checkAmounts(p)
}

// 5. A payment that is not succeeded cannot be refunded: a clear 409,
// nothing stored, the key stays free.
func TestRefundOfAnUnsucceededPaymentIsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	declined := e.request("declined")
	declined.PaymentMethod = fake.MethodDeclined
	out, err := e.svc.Create(ctx, declined)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := e.store.Payment(ctx, e.merch.ID, out.SubjectID)
	processing := e.crash("processing", false)
	review := e.crash("review", false)
	if _, err := e.db.Exec(`UPDATE payments SET status = 'requires_review' WHERE id = ?`, review.ID); err != nil {
		t.Fatal(err)
	}
	failed := e.crash("failed", false)
	if _, err := e.db.Exec(`UPDATE payments SET status = 'failed' WHERE id = ?`, failed.ID); err != nil {
		t.Fatal(err)
	}
	for _, p := range []payments.Payment{d, processing, review, failed} {
		if _, err := e.refund(p, "r-"+p.ID, nil); errs.CodeOf(err) != errs.CodeNotRefundable {
			t.Fatalf("refund of a %s payment: %v", p.IdempotencyKey, err)
		}
	}
	if _, err := e.refund(payments.Payment{ID: "pay_nope"}, "r", nil); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("refund of no payment: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM refunds`) + e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE endpoint = ?`, payments.EndpointCreateRefund); n != 0 {
		t.Fatal("a refused refund stored something")
	}
	if e.psp.RefundCalls() != 0 {
		t.Fatal("a refused refund reached the PSP")
	}
}

// 6. A refund whose worker died is settled by the reconciler; one the PSP
// cannot tell about goes to review, and a person resolves it with audit.
func TestStaleRefundsAreReconciled(t *testing.T) {
	e := newEnv(t)
	p := e.paid("pay", 1000)
	// Sent and lost; then nobody retries.
	e.psp.FailNextRefunds(fake.FaultUnknownAfterCharge, 1)
	if _, err := e.refund(p, "sent", amt(100)); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("lost: %v", err)
	}
	// Never sent: the PSP refused before acting, and the lookups fail.
	e.psp.FailNextRefunds(fake.FaultUnknownBeforeCharge, 1)
	if _, err := e.refund(p, "lost", amt(200)); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("lost before: %v", err)
	}
	e.advance(lease + time.Second)
	r := e.reconciler(nil, nil, func(c *reconcile.Config) { c.MaxAttempts = 1 })
	orderLost := payments.RefundOrderID(e.merch.ID, p.ID, "lost")
	look := &failLookupsFor{Adapter: e.psp, order: orderLost}
	r = e.reconciler(look, nil, func(c *reconcile.Config) { c.MaxAttempts = 1 })
	sum := runOnce(t, r)
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Succeeded: 1, reconcile.Review: 1})
	var reviewID string
	if err := e.db.Get(&reviewID, `SELECT id FROM refunds WHERE status = 'requires_review'`); err != nil {
		t.Fatal(err)
	}
	got := e.checkAmounts(p)
	if got.AmountReserved != 300 || got.AmountRefunded != 100 {
		t.Fatalf("reserved %d refunded %d", got.AmountReserved, got.AmountRefunded)
	}
	// The refund in review is counted where ops look: the backlog (its
	// gauges and alert), the pass's summary.
	if sum.RefundsNeedReview != 1 || sum.Backlog.RefundsNeedReview != 1 || sum.Backlog.OldestRefundReview < 0 {
		t.Fatalf("the pass counts %d refund(s) in review (backlog %+v), want 1", sum.RefundsNeedReview, sum.Backlog)
	}
	// Ops look at the PSP (which has none) and fail it; the reservation returns.
	adm := review.New(e.store, review.Config{PSPs: payments.OnePSP(e.psp)})
	if _, err := adm.ResolveRefund(context.Background(), review.RefundResolution{RefundID: reviewID, To: payments.RefundSucceeded, Reason: "x", Actor: "ops"}); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("succeeded while the PSP has none: %v", err)
	}
	if _, err := adm.ResolveRefund(context.Background(), review.RefundResolution{RefundID: reviewID, To: payments.RefundFailed, Reason: "not at the PSP", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT COUNT(*) FROM refund_resolutions WHERE refund_id = ? AND actor = 'ops' AND to_status = 'failed'`, reviewID); n != 1 {
		t.Fatal("no audit row")
	}
	if got := e.checkAmounts(p); got.AmountReserved != 100 {
		t.Fatalf("reserved %d after the failed refund", got.AmountReserved)
	}
	if e.psp.RefundCalls() != 2 {
		t.Fatalf("%d refund calls: the reconciler sent one", e.psp.RefundCalls())
	}
}

// failLookupsFor fails every refund lookup of one refund order.
type failLookupsFor struct {
	psp.Adapter
	order string
}

func (f *failLookupsFor) LookupRefund(ctx context.Context, chargeRef, order string) (psp.Refund, error) {
	if order == f.order {
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: "lookup_refund", Err: errors.New("timeout")}
	}
	return f.Adapter.LookupRefund(ctx, chargeRef, order)
}

// 7. Another merchant can neither refund nor read a merchant's payments.
func TestRefundsAreScopedPerMerchant(t *testing.T) {
	e := newEnv(t)
	p := e.paid("pay", 1000)
	other, key, err := merchants.NewMerchant("Other", e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CreateMerchant(context.Background(), other, key); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.CreateRefund(context.Background(), payments.RefundRequest{MerchantID: other.ID, PaymentID: p.ID, IdempotencyKey: "r"})
	if errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("another merchant's refund: %v", err)
	}
	out, err := e.refund(p, "r", amt(10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Refund(context.Background(), other.ID, out.SubjectID); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("another merchant reads the refund: %v", err)
	}
}

// 8. The purge removes expired refund keys; a purged key reused is a 409
// naming the refund, never a second refund.
func TestPurgedRefundKeyNamesTheRefund(t *testing.T) {
	e := newEnv(t)
	p := e.paid("pay", 1000)
	out, err := e.refund(p, "r", amt(10))
	if err != nil {
		t.Fatal(err)
	}
	e.advance(8 * 24 * time.Hour)
	if _, err := e.reconciler(nil, nil, func(c *reconcile.Config) { c.Retention = 7 * 24 * time.Hour }).Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE endpoint = ?`, payments.EndpointCreateRefund); n != 0 {
		t.Fatal("the refund key was not purged")
	}
	_, err = e.refund(p, "r", amt(10))
	var pe *errs.Error
	if !errors.As(err, &pe) || pe.Code != errs.CodeKeyReused || pe.RefundID != out.SubjectID {
		t.Fatalf("reused purged key: %v", err)
	}
	if e.psp.RefundCalls() != 1 {
		t.Fatal("the purged key's retry refunded again")
	}
	e.checkAmounts(p)
}

// A refund the PSP refuses is a final answer, stored and replayed, and
// gives its reservation back; one it accepts and finishes later is followed
// by the refund queue.
func TestRefusedAndPendingRefunds(t *testing.T) {
	e := newEnv(t)
	p := e.paid("pay", 1000)
	// The fake refuses a refund above what is left at the PSP: make the
	// gateway believe more is left than the PSP does.
	if _, err := e.psp.Refund(context.Background(), psp.RefundRequest{RefundOrderID: "rfd_elsewhere", MerchantOrderID: p.MerchantOrderID,
		ChargeReference: p.PSPReference, Amount: 900, Currency: "KRW"}); err != nil {
		t.Fatal(err)
	}
	out, err := e.refund(p, "r", amt(500))
	if err != nil || out.Response.Status != http.StatusPaymentRequired || !bytes.Contains(out.Response.Body, []byte(`"status":"failed"`)) {
		t.Fatalf("refused refund: %+v %v", out, err)
	}
	if got, _ := e.store.Payment(context.Background(), e.merch.ID, p.ID); got.AmountReserved != 0 {
		t.Fatalf("a refused refund still reserves %d", got.AmountReserved)
	}
	again, err := e.refund(p, "r", amt(500))
	if err != nil || !again.Replayed || !bytes.Equal(again.Response.Body, out.Response.Body) {
		t.Fatalf("replay of the refusal: %+v %v", again, err)
	}
}

// 9. Paging through a merchant's payments while 250 more are created: no
// payment twice, none of those that existed at the start missed; and back
// again with ending_before.
func TestPaymentListingIsStableUnderInserts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := map[string]bool{}
	for i := range 120 {
		before[e.paid(fmt.Sprintf("old%03d", i), 1000).ID] = true
	}
	l := listings.New(e.store)
	var (
		wg      sync.WaitGroup
		inserts = make(chan int, 250)
	)
	for i := range 250 {
		inserts <- i
	}
	close(inserts)
	wg.Go(func() {
		for i := range inserts {
			if _, err := e.svc.Create(ctx, e.request(fmt.Sprintf("new%03d", i))); err != nil {
				t.Error(err)
				return
			}
		}
	})
	seen := map[string]bool{}
	var pages [][]payments.Payment
	q := listings.Query{MerchantID: e.merch.ID, Limit: 7}
	for {
		page, err := l.Payments(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page.Items {
			if seen[p.ID] {
				t.Fatalf("payment %s listed twice", p.ID)
			}
			seen[p.ID] = true
		}
		pages = append(pages, page.Items)
		if !page.HasMore {
			break
		}
		q.StartingAfter = page.Items[len(page.Items)-1].ID
	}
	wg.Wait()
	for id := range before {
		if !seen[id] {
			t.Fatalf("payment %s, there from the start, was never listed", id)
		}
	}
	// Back from the last page to the first, with ending_before.
	last := pages[len(pages)-1]
	back, err := l.Payments(ctx, listings.Query{MerchantID: e.merch.ID, Limit: 7, EndingBefore: last[0].ID})
	if err != nil || len(back.Items) != 7 || back.Items[6].ID != pages[len(pages)-2][6].ID {
		t.Fatalf("ending_before: %d items, %v", len(back.Items), err)
	}
	// Another merchant's id is no cursor here; filters narrow the listing.
	if _, err := l.Payments(ctx, listings.Query{MerchantID: "mer_other", StartingAfter: last[0].ID}); errs.CodeOf(err) != errs.CodeInvalid {
		t.Fatalf("a foreign cursor: %v", err)
	}
	failed, err := l.Payments(ctx, listings.Query{MerchantID: e.merch.ID, Status: "failed"})
	if err != nil || len(failed.Items) != 0 {
		t.Fatalf("status filter: %+v %v", failed, err)
	}
	if _, err := l.Payments(ctx, listings.Query{MerchantID: e.merch.ID, Limit: 101}); errs.CodeOf(err) != errs.CodeInvalid {
		t.Fatalf("limit 101: %v", err)
	}
}

// A refund whose payment's row cannot be read is set aside for a day and
// counted as quarantined; the refund queue goes on with every other
// refund. Before, the claim failed on it, rolled back, and no refund of
// any merchant was checked again.
func TestAnUnreadablePaymentDoesNotStopTheRefundQueue(t *testing.T) {
	e := newEnv(t)
	garbled, fine := e.paid("garbled", 1000), e.paid("fine", 1000)
	for _, p := range []payments.Payment{garbled, fine} {
		if out, err := e.refund(p, "r-"+p.ID, amt(100)); err != nil || out.Response.Status != http.StatusCreated {
			t.Fatalf("refund: %+v %v", out, err)
		}
	}
	// Both in review, due now, as the PSP's answers left them; the
	// payments' amounts as a refund in review holds them.
	if _, err := e.db.Exec(`UPDATE refunds SET status = 'requires_review', review_since = NOW(6), review_after = NOW(6)`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(`UPDATE payments SET amount_reserved = amount_reserved + 100, amount_refunded = amount_refunded - 100`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(`UPDATE payments SET metadata = '{not json' WHERE id = ?`, garbled.ID); err != nil {
		t.Fatal(err)
	}
	sum := runOnce(t, e.reconciler(nil, nil))
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Quarantined: 1, reconcile.Succeeded: 1})
	if n := e.count(`SELECT COUNT(*) FROM refunds WHERE payment_id = ? AND status = 'succeeded'`, fine.ID); n != 1 {
		t.Fatal("the readable payment's refund was not settled")
	}
	if n := e.count(`SELECT COUNT(*) FROM refunds WHERE payment_id = ? AND status = 'requires_review' AND review_after > NOW(6) + INTERVAL 23 HOUR`, garbled.ID); n != 1 {
		t.Fatal("the unreadable payment's refund is not set aside for a day")
	}
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), nil) // not claimed again before then
}

// An operator's forced correction of a failed refund to succeeded takes its
// amount again only if the payment can still hold it: when the payment's
// other refunds reserve the rest, it is refused (409) and nothing changes.
// Before, the correction took the reservation beyond the payment's amount.
func TestAForcedRefundCorrectionNeverExceedsThePayment(t *testing.T) {
	e := newEnv(t)
	p := e.paid("pay", 1000)
	e.psp.FailNextRefunds(fake.FaultNotProcessed, 1)
	if _, err := e.refund(p, "never-sent", amt(300)); errs.CodeOf(err) != errs.CodePSPUnavailable {
		t.Fatalf("refused before sending: %v", err)
	}
	e.advance(lease + time.Second)
	runOnce(t, e.reconciler(nil, nil))
	var failed string
	if err := e.db.Get(&failed, `SELECT id FROM refunds WHERE idem_key = 'never-sent' AND status = 'failed'`); err != nil {
		t.Fatalf("the refund never sent is not failed: %v", err)
	}
	if out, err := e.refund(p, "the-rest", nil); err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("refund of the rest: %+v %v", out, err)
	}
	adm := review.New(e.store, review.Config{PSPs: payments.OnePSP(e.psp)})
	_, err := adm.ResolveRefund(context.Background(), review.RefundResolution{RefundID: failed, To: payments.RefundSucceeded,
		Reason: "the bank says it was paid", Actor: "ops", Force: true})
	if errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("forced correction beyond the payment: %v, want a conflict", err)
	}
	if got := e.checkAmounts(p); got.AmountReserved != 1000 || got.AmountRefunded != 1000 {
		t.Fatalf("reserved %d, refunded %d after the refused correction; want 1000 and 1000", got.AmountReserved, got.AmountRefunded)
	}
	if n := e.count(`SELECT COUNT(*) FROM refunds WHERE id = ? AND status = 'failed'`, failed); n != 1 {
		t.Fatal("the refused correction moved the refund")
	}
}
