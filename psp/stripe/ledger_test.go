package stripe_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/psp"
	"gateway/psp/psptest"
	"gateway/psp/stripe"
	"gateway/psp/stripe/stripetest"
)

// clock is a time the test sets and the fake reads, from its own goroutine.
type clock struct{ ns atomic.Int64 }

func (c *clock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time  { return time.Unix(0, c.ns.Load()) }

// ledgerEnv is the fake Stripe API on a clock, and the adapter.
type ledgerEnv struct {
	fake *stripetest.Server
	clk  *clock
	a    *stripe.Adapter
	url  string
}

func newLedgerEnv(t *testing.T, at time.Time) *ledgerEnv {
	t.Helper()
	e := &ledgerEnv{fake: stripetest.New(key), clk: &clock{}}
	e.clk.set(at)
	e.fake.SetClock(e.clk.now)
	ts := httptest.NewServer(e.fake)
	t.Cleanup(ts.Close)
	e.a, e.url = mustNew(t, ts.URL), ts.URL
	return e
}

func (e *ledgerEnv) charge(t *testing.T, n int, method string, manual bool) psp.Charge {
	t.Helper()
	req := psp.ChargeRequest{MerchantOrderID: order(n), MerchantID: "mer_1", Amount: 15000, Currency: "KRW", PaymentMethod: method, AllowNextAction: true}
	if manual {
		req.CaptureMethod = psp.CaptureManual
	}
	c, err := e.a.Charge(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *ledgerEnv) refund(t *testing.T, c psp.Charge, amount int64) psp.Refund {
	t.Helper()
	r, err := e.a.Refund(t.Context(), psp.RefundRequest{RefundOrderID: "rfd_" + c.MerchantOrderID[4:], MerchantOrderID: c.MerchantOrderID,
		ChargeReference: c.Reference, Amount: amount, Currency: "KRW"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func order(n int) string { return fmt.Sprintf("ord_%024d", n) }

// listAll pages through q's period from q's cursor, calling between (when
// not nil) after each page but the last; it returns the lines and how many
// pages held them.
func listAll(t *testing.T, l psp.Ledger, q psp.LedgerQuery, between func(page int)) (all []psp.Transaction, pages int) {
	t.Helper()
	for pages = 1; pages < 1000; pages++ {
		page, err := l.ListTransactions(t.Context(), q)
		if err != nil {
			t.Fatalf("ListTransactions(cursor %q): %v", q.Cursor, err)
		}
		if max(q.Limit, 2) < len(page.Transactions) && q.Limit > 0 {
			t.Fatalf("a page of limit %d has %d lines", q.Limit, len(page.Transactions))
		}
		all = append(all, page.Transactions...)
		if q.Cursor = page.Next; q.Cursor == "" {
			return all, pages
		}
		if between != nil {
			between(pages)
		}
	}
	t.Fatal("the listing never ended")
	return nil, 0
}

// byReference sorts lines so that two listings compare whatever their pages.
func byReference(lines []psp.Transaction) []psp.Transaction {
	out := append([]psp.Transaction(nil), lines...)
	sort.Slice(out, func(i, j int) bool { return out[i].Reference < out[j].Reference })
	return out
}

// The ledger lists every PaymentIntent of the period as a charge as it
// stands (the merchant it was created for read back from its metadata) and
// every Refund, whatever the page size, each line once.
func TestLedgerOverTheFake(t *testing.T) {
	start := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	e := newLedgerEnv(t, start)
	tick := func() { e.clk.set(e.clk.now().Add(time.Second)) }
	ok := e.charge(t, 1, "pm_card_visa", false)
	tick()
	declined := e.charge(t, 2, "pm_card_chargeDeclined", false)
	tick()
	held := e.charge(t, 3, "pm_card_visa", true)
	if _, err := e.a.Capture(t.Context(), psp.CaptureRequest{OrderID: "cap_3", MerchantOrderID: held.MerchantOrderID, ChargeReference: held.Reference, Amount: 6000, Currency: "KRW"}); err != nil {
		t.Fatal(err)
	}
	tick()
	voided := e.charge(t, 4, "pm_card_visa", true)
	if _, err := e.a.Void(t.Context(), psp.VoidRequest{OrderID: "vod_4", MerchantOrderID: voided.MerchantOrderID, ChargeReference: voided.Reference}); err != nil {
		t.Fatal(err)
	}
	tick()
	authorized := e.charge(t, 5, "pm_card_visa", true)
	tick()
	threeDS := e.charge(t, 6, "pm_card_authenticationRequired", false)
	tick()
	rf := e.refund(t, ok, 5000)
	tick()
	e.fake.SetRefundsPending(true)
	pending := e.refund(t, held, 1000)

	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	line := func(c psp.Charge, status string, captured int64, s int) psp.Transaction {
		return psp.Transaction{Kind: psp.TransactionCharge, MerchantOrderID: c.MerchantOrderID, Reference: c.Reference, Status: status,
			Amount: 15000, AmountCaptured: captured, Currency: "KRW", MerchantID: "mer_1", CreatedAt: at(s)}
	}
	refund := func(r psp.Refund, c psp.Charge, status string, s int) psp.Transaction {
		return psp.Transaction{Kind: psp.TransactionRefund, MerchantOrderID: c.MerchantOrderID, RefundOrderID: r.RefundOrderID, Reference: r.Reference,
			ChargeReference: c.Reference, Status: status, Amount: r.Amount, Currency: "KRW", CreatedAt: at(s)}
	}
	want := byReference([]psp.Transaction{
		line(ok, "succeeded", 15000, 0),
		line(declined, "declined", 0, 1),
		line(held, "succeeded", 6000, 2),
		line(voided, "voided", 0, 3),
		line(authorized, "authorized", 0, 4),
		line(threeDS, "pending", 0, 5),
		refund(rf, ok, "succeeded", 6),
		refund(pending, held, "pending", 7),
	})
	for _, limit := range []int{1, 2, 3, 0, 500} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, _ := listAll(t, e.a, psp.LedgerQuery{From: start, To: start.Add(time.Hour), Limit: limit}, nil)
			got = byReference(got)
			if len(got) != len(want) {
				t.Fatalf("listing %+v, want %d lines", got, len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// A line is in the period of its second: periods whose boundaries fall
// inside a second split the lines exactly, and the request says so in
// created[gte] and created[lt].
func TestLedgerSecondBoundaries(t *testing.T) {
	s := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	e := newLedgerEnv(t, s)
	for i, at := range []time.Time{s.Add(-300 * time.Millisecond), s.Add(700 * time.Millisecond), s.Add(1999 * time.Millisecond)} {
		e.clk.set(at) // created: s-1, s and s+1
		e.charge(t, i, "pm_card_visa", false)
	}
	boundary := s.Add(500 * time.Millisecond)
	periods := []struct {
		from, to time.Time
		want     []string
		query    string // created[gte], created[lt]
	}{
		{s.Add(-time.Hour), boundary, []string{order(0), order(1)}, "created[gte]=1709290800&created[lt]=1709294401"},
		{boundary, s.Add(time.Hour), []string{order(2)}, "created[gte]=1709294401&created[lt]=1709298000"},
		// A period inside one second holds no second's start.
		{s.Add(100 * time.Millisecond), boundary, nil, ""},
		{s.Add(-time.Second), s, []string{order(0)}, "created[gte]=1709294399&created[lt]=1709294400"},
	}
	for _, p := range periods {
		before := len(e.fake.Requests())
		got, _ := listAll(t, e.a, psp.LedgerQuery{From: p.from, To: p.to}, nil)
		var orders []string
		for _, l := range got {
			orders = append(orders, l.MerchantOrderID)
			if l.CreatedAt.Before(p.from) || !l.CreatedAt.Before(p.to) || l.CreatedAt.Nanosecond() != 0 {
				t.Errorf("[%s, %s) lists a line created at %s", p.from, p.to, l.CreatedAt)
			}
		}
		sort.Strings(orders)
		if strings.Join(orders, " ") != strings.Join(p.want, " ") {
			t.Errorf("[%s, %s) lists %v, want %v", p.from, p.to, orders, p.want)
		}
		reqs := e.fake.Requests()[before:]
		if p.query == "" {
			if len(reqs) != 0 {
				t.Errorf("[%s, %s) sent %d requests", p.from, p.to, len(reqs))
			}
			continue
		}
		for _, r := range reqs {
			q := r.URL.Query()
			if got := "created[gte]=" + q.Get("created[gte]") + "&created[lt]=" + q.Get("created[lt]"); got != p.query {
				t.Errorf("%s %s asked %s, want %s", r.Method, r.URL.Path, got, p.query)
			}
		}
	}
}

// PaymentIntents and Refunds created while a listing pages, inside its
// period, are on a later page: the listing reads each list down from its
// newest object, then up to what is newer, and ends only on a page where
// neither list had anything new. Objects are made after the given pages:
// on the way down (the listing would otherwise end with the way down), and
// on the way up.
func TestLedgerSeesWhatIsCreatedWhilePaging(t *testing.T) {
	for _, tt := range []struct {
		name  string
		after map[int]bool // pages after which a PaymentIntent and a refund of it are made
	}{
		{"on the way down", map[int]bool{1: true}},
		{"on the way down and up", map[int]bool{1: true, 3: true, 6: true, 7: true, 8: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
			e := newLedgerEnv(t, start)
			n := 0
			next := func() psp.Charge {
				e.clk.set(start.Add(time.Duration(n) * time.Second))
				n++
				return e.charge(t, n, "pm_card_visa", false)
			}
			for range 5 {
				next()
			}
			var made []string
			got, pages := listAll(t, e.a, psp.LedgerQuery{From: start, To: start.Add(time.Hour), Limit: 2}, func(page int) {
				if tt.after[page] {
					c := next()
					made = append(made, c.Reference, e.refund(t, c, 100).Reference)
				}
			})
			seen := map[string]int{}
			for _, l := range got {
				seen[l.Reference]++
			}
			if len(got) != 5+len(made) || len(seen) != len(got) {
				t.Fatalf("%d lines over %d pages, %d distinct; want %d, each once: %v", len(got), pages, len(seen), 5+len(made), seen)
			}
			for _, ref := range made {
				if seen[ref] != 1 {
					t.Errorf("%s, made while the listing paged, listed %d times", ref, seen[ref])
				}
			}
			// Both lists are read down, then up; no request pages both ways.
			var down, up int
			for _, r := range e.fake.Requests() {
				q := r.URL.Query()
				if r.Method != http.MethodGet {
					continue
				}
				if q.Get("starting_after") != "" {
					down++
				}
				if q.Get("ending_before") != "" {
					up++
				}
				if q.Get("starting_after") != "" && q.Get("ending_before") != "" {
					t.Errorf("a request pages both ways: %s", r.URL.RawQuery)
				}
			}
			if down == 0 || up == 0 {
				t.Fatalf("%d requests down, %d up; want both", down, up)
			}
		})
	}
}

// The charge names its merchant in metadata[gateway_merchant_id], which the
// ledger reads back; a charge without one (or one too long for Stripe's
// metadata) sends none.
func TestChargeSendsTheMerchant(t *testing.T) {
	e := newLedgerEnv(t, time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC))
	for i, m := range []string{"mer_1", "", strings.Repeat("m", 501)} {
		if _, err := e.a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order(i), MerchantID: m, Amount: 100, Currency: "USD", PaymentMethod: "pm_card_visa"}); err != nil {
			t.Fatal(err)
		}
	}
	var sent []string
	for _, r := range e.fake.Requests() {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
			_, has := r.PostForm["metadata[gateway_merchant_id]"]
			sent = append(sent, fmt.Sprint(has, " ", r.PostForm.Get("metadata[gateway_merchant_id]")))
		}
	}
	if strings.Join(sent, ",") != "true mer_1,false ,false " {
		t.Fatalf("metadata[gateway_merchant_id] sent: %q", sent)
	}
	got, _ := listAll(t, e.a, psp.LedgerQuery{From: time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2024, 3, 2, 0, 0, 0, 0, time.UTC)}, nil)
	merchants := map[string]string{}
	for _, l := range got {
		merchants[l.MerchantOrderID] = l.MerchantID
	}
	if merchants[order(0)] != "mer_1" || merchants[order(1)] != "" || merchants[order(2)] != "" || len(merchants) != 3 {
		t.Fatalf("merchants read back %v", merchants)
	}
}

// A charge first sent by an adapter from before charges named their
// merchant, and sent again within its key's 24 hours, is the same request
// to Stripe: the adapter resends it without the merchant and gets the first
// answer, not an idempotency conflict; a key reused with another amount is
// still a conflict.
func TestChargeNamingTheMerchantRepeatsAnOlderOne(t *testing.T) {
	e := newLedgerEnv(t, time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC))
	req := psp.ChargeRequest{MerchantOrderID: order(1), Amount: 15000, Currency: "KRW", PaymentMethod: "pm_card_visa"}
	first, err := e.a.Charge(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.MerchantID = "mer_1"
	again, err := e.a.Charge(t.Context(), req)
	if err != nil || again != first || e.fake.Charges(req.MerchantOrderID) != 1 {
		t.Fatalf("the repeat naming its merchant = %+v, %v (%d PaymentIntents); want %+v once", again, err, e.fake.Charges(req.MerchantOrderID), first)
	}
	req.Amount++
	_, err = e.a.Charge(t.Context(), req)
	if class, _ := psp.ClassOf(err); class != psp.NotProcessed || !errors.Is(err, psp.ErrOrderConflict) {
		t.Fatalf("the key with another amount = %v, want NotProcessed ErrOrderConflict", err)
	}
}

// A refund made in Stripe's dashboard carries no metadata: its line names
// the order of the PaymentIntent it refunds.
func TestLedgerDashboardRefund(t *testing.T) {
	start := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	e := newLedgerEnv(t, start)
	c := e.charge(t, 1, "pm_card_visa", false)
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/refunds", strings.NewReader(url.Values{"payment_intent": {c.Reference}, "amount": {"700"}}.Encode()))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("dashboard refund: %s", res.Status)
	}
	got, _ := listAll(t, e.a, psp.LedgerQuery{From: start, To: start.Add(time.Hour)}, nil)
	if len(got) != 2 || got[1].Kind != psp.TransactionRefund || got[1].MerchantOrderID != c.MerchantOrderID || got[1].RefundOrderID != "" ||
		got[1].ChargeReference != c.Reference || got[1].Amount != 700 {
		t.Fatalf("listing %+v; want the charge and its dashboard refund", got)
	}
}

// Each answer to a listing's request lands in its class; an empty period
// and a cursor the adapter did not make are Rejected before anything is
// sent.
func TestLedgerAnswers(t *testing.T) {
	from := time.Unix(1709251200, 0).UTC() // 2024-03-01
	q := psp.LedgerQuery{From: from, To: from.Add(time.Hour)}
	pi := func(extra string) string {
		return `{"id":"pi_1","object":"payment_intent","amount":15000,"currency":"krw","status":"succeeded","created":1709251300,` +
			`"metadata":{"merchant_order_id":"` + order(1) + `","gateway_merchant_id":"mer_1"}` + extra + `}`
	}
	list := func(data ...string) string {
		return `{"object":"list","has_more":false,"data":[` + strings.Join(data, ",") + `]}`
	}
	empty := list()
	tests := []struct {
		name          string
		status        int
		pis, refunds  string
		class         psp.Class // 0: one charge line
		is            error
		lineStatus    string
		lineCurrency  string
		lineMerchant  string
		lineCaptured  int64
		lineCreatedAt int64
	}{
		{"succeeded", 200, list(pi("")), empty, 0, nil, "succeeded", "KRW", "mer_1", 15000, 1709251300},
		{"unpaid, payable still", 200, list(strings.Replace(pi(""), `"succeeded"`, `"requires_payment_method"`, 1)), empty, 0, nil, "pending", "KRW", "mer_1", 0, 1709251300},
		{"never confirmed", 200, list(strings.Replace(pi(""), `"succeeded"`, `"requires_confirmation"`, 1)), empty, 0, nil, "pending", "KRW", "mer_1", 0, 1709251300},
		{"a status never seen", 200, list(strings.Replace(pi(""), `"succeeded"`, `"half_done"`, 1)), empty, psp.Unknown, nil, "", "", "", 0, 0},
		{"a currency not taken", 200, list(strings.Replace(pi(""), `"krw"`, `"xyz"`, 1)), empty, psp.Unknown, psp.ErrMismatch, "", "", "", 0, 0},
		{"created before the period", 200, list(strings.Replace(pi(""), "1709251300", "1709251199", 1)), empty, psp.Unknown, psp.ErrMismatch, "", "", "", 0, 0},
		{"created at the period's end", 200, list(strings.Replace(pi(""), "1709251300", "1709254800", 1)), empty, psp.Unknown, psp.ErrMismatch, "", "", "", 0, 0},
		{"a refund of an unknown status", 200, empty, list(`{"id":"re_1","object":"refund","amount":100,"currency":"krw","status":"lost","created":1709251300}`), psp.Unknown, nil, "", "", "", 0, 0},
		{"no id", 200, list(strings.Replace(pi(""), `"id":"pi_1",`, "", 1)), empty, psp.Unknown, nil, "", "", "", 0, 0},
		{"unreadable", 200, `{"object":"list","data":[`, empty, psp.Unknown, nil, "", "", "", 0, 0},
		{"rate limited", 429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`, "", psp.NotProcessed, nil, "", "", "", 0, 0},
		{"bad key", 401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`, "", psp.NotProcessed, nil, "", "", "", 0, 0},
		{"an invalid request is no answer", 400, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"starting_after","message":"No such payment_intent"}}`, "", psp.Unknown, nil, "", "", "", 0, 0},
		{"api error", 500, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`, "", psp.Unknown, nil, "", "", "", 0, 0},
		{"edge html", 502, `<html>Bad Gateway</html>`, "", psp.Unknown, nil, "", "", "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				body := tt.pis
				if r.URL.Path == "/v1/refunds" && tt.refunds != "" {
					body = tt.refunds
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, body)
			}))
			defer ts.Close()
			page, err := mustNew(t, ts.URL).ListTransactions(t.Context(), q)
			if tt.class != 0 {
				var e *psp.Error
				if !errors.As(err, &e) || e.Class != tt.class || e.Op != "list" {
					t.Fatalf("got %+v, %v; want class %s of op list", page, err, tt.class)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Fatalf("err = %v, want %v", err, tt.is)
				}
				return
			}
			if err != nil || len(page.Transactions) != 1 || page.Next == "" {
				t.Fatalf("got %+v, %v; want one line and a next page (the way up)", page, err)
			}
			l := page.Transactions[0]
			if l.Kind != psp.TransactionCharge || l.Status != tt.lineStatus || l.Currency != tt.lineCurrency || l.MerchantID != tt.lineMerchant ||
				l.AmountCaptured != tt.lineCaptured || l.CreatedAt != time.Unix(tt.lineCreatedAt, 0).UTC() || l.Reference != "pi_1" || l.MerchantOrderID != order(1) {
				t.Fatalf("line %+v", l)
			}
		})
	}

	t.Run("refused unsent", func(t *testing.T) {
		var asked atomic.Int32
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked.Add(1) }))
		defer ts.Close()
		a := mustNew(t, ts.URL)
		for _, bad := range []psp.LedgerQuery{
			{From: from, To: from},
			{From: from, To: from.Add(-time.Second)},
			{From: from, To: from.Add(time.Hour), Cursor: "7"},
			{From: from, To: from.Add(time.Hour), Cursor: "eyJwIjp7ImEiOiJwaV8xIn0sInIiOnt9LCJ4IjoxfQ"}, // an unknown field
			{From: from, To: from.Add(time.Hour), Cursor: "eyJwIjp7ImEiOiJwaS8uLi8ifSwiciI6e319"},       // an id that is not one
		} {
			_, err := a.ListTransactions(t.Context(), bad)
			var e *psp.Error
			if !errors.As(err, &e) || e.Class != psp.Rejected || e.Op != "list" {
				t.Errorf("ListTransactions(%+v) = %v, want Rejected", bad, err)
			}
		}
		if asked.Load() != 0 {
			t.Fatalf("%d requests sent", asked.Load())
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		_, err := mustNew(t, psptest.UnreachableURL(t)).ListTransactions(t.Context(), q)
		if class, _ := psp.ClassOf(err); class != psp.NotProcessed {
			t.Fatalf("err = %v, want NotProcessed", err)
		}
	})
	t.Run("a cursor survives the trip", func(t *testing.T) {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/payment_intents" {
				_, _ = io.WriteString(w, `{"object":"list","has_more":true,"data":[`+pi("")+`]}`)
				return
			}
			_, _ = io.WriteString(w, empty)
		}))
		defer ts.Close()
		a := mustNew(t, ts.URL)
		page, err := a.ListTransactions(t.Context(), psp.LedgerQuery{From: from, To: from.Add(time.Hour), Limit: 2})
		if err != nil || page.Next == "" {
			t.Fatalf("got %+v, %v", page, err)
		}
		if _, err := a.ListTransactions(t.Context(), psp.LedgerQuery{From: from, To: from.Add(time.Hour), Limit: 2, Cursor: page.Next}); err != nil {
			t.Fatalf("the next page from %q: %v", page.Next, err)
		}
		if len(page.Next) > 1024 {
			t.Fatalf("a cursor of %d bytes does not fit the books' ledger_cursor", len(page.Next))
		}
	})
}
