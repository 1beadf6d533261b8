package stripe_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/stripe/stripe-go/v82"

	"gateway/psp"
	"gateway/psp/stripe/stripetest"
)

// TestStripeMock sends every kind of request the adapter makes to
// stripe-mock, the mock Stripe generates from its published OpenAPI
// specification, and checks that stripe-mock accepts each one (it validates
// every parameter against the specification) and that each of its answers
// reads as the SDK's type. stripe-mock is stateless and echoes no metadata,
// so a shim between the adapter and it gives its answers this request's ids,
// amounts and statuses before the adapter reads them; what is checked against
// the specification is what went in and what came out unaltered. The
// ledger's lists (PaymentIntents and Refunds by created, paged both ways)
// are answered with the shim's own objects, paged as Stripe pages them.
//
// It runs when STRIPE_MOCK_BIN names a stripe-mock binary (the test starts
// it) or STRIPE_MOCK_URL points at a running one; `make stripe-mock-test`
// builds the binary and sets the variable.
func TestStripeMock(t *testing.T) {
	base := stripeMock(t)
	shim := &mockShim{t: t, base: base, currencies: map[string]string{}, refunds: map[string][]map[string]any{},
		decline: map[string]bool{"ord_000000000000000000000006": true}, pis: map[string]map[string]any{}}
	ts := httptest.NewServer(shim)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	ctx := t.Context()

	charges := []psp.ChargeRequest{
		{MerchantOrderID: "ord_000000000000000000000001", MerchantID: "mer_1", Amount: 15000, Currency: "KRW", PaymentMethod: "pm_card_visa", Description: "Order A-1"},
		{MerchantOrderID: "ord_000000000000000000000002", MerchantID: "mer_1", Amount: 1999, Currency: "USD", PaymentMethod: "pm_card_visa"},
		{MerchantOrderID: "ord_000000000000000000000003", Amount: 1000, Currency: "ISK", PaymentMethod: "pm_card_visa"},
		{MerchantOrderID: "ord_000000000000000000000004", Amount: 5120, Currency: "KWD", PaymentMethod: "pm_card_visa"},
		// Two-step checkout: no error_on_requires_action.
		{MerchantOrderID: "ord_000000000000000000000005", Amount: 1500, Currency: "MGA", PaymentMethod: "pm_card_visa", AllowNextAction: true},
	}
	for _, req := range charges {
		c, err := a.Charge(ctx, req)
		if err != nil || c.Status != psp.Succeeded {
			t.Fatalf("Charge(%d %s) = %+v, %v", req.Amount, req.Currency, c, err)
		}
		if _, err := a.Lookup(ctx, req.MerchantOrderID); err != nil {
			t.Fatalf("Lookup(%s): %v", req.MerchantOrderID, err)
		}
		r := psp.RefundRequest{RefundOrderID: "rfd_" + req.MerchantOrderID[4:], MerchantOrderID: req.MerchantOrderID,
			ChargeReference: c.Reference, Amount: req.Amount, Currency: req.Currency, Reason: "customer asked"}
		if got, err := a.Refund(ctx, r); err != nil || got.Status != psp.RefundSucceeded {
			t.Fatalf("Refund(%s) = %+v, %v", r.RefundOrderID, got, err)
		}
		if _, err := a.LookupRefund(ctx, c.Reference, r.RefundOrderID); err != nil {
			t.Fatalf("LookupRefund(%s): %v", r.RefundOrderID, err)
		}
	}

	// A decline is made final by canceling its PaymentIntent.
	declined := psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000006", Amount: 2500, Currency: "USD", PaymentMethod: "pm_card_visa"}
	if c, err := a.Charge(ctx, declined); err != nil || c.Status != psp.Declined {
		t.Fatalf("Charge(declined) = %+v, %v", c, err)
	}

	// Manual capture: an authorization captured in part and refunded, one
	// voided, and the two refusals the adapter answers by retrieving.
	held := psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000007", Amount: 15000, Currency: "KRW", PaymentMethod: "pm_card_visa",
		CaptureMethod: psp.CaptureManual}
	auth, err := a.Charge(ctx, held)
	if err != nil || auth.Status != psp.Authorized || auth.CaptureBefore.IsZero() {
		t.Fatalf("Charge(manual) = %+v, %v; want authorized, with capture_before", auth, err)
	}
	if got, err := a.Lookup(ctx, held.MerchantOrderID); err != nil || !got.Equal(auth) {
		t.Fatalf("Lookup(authorized) = %+v, %v; want %+v", got, err, auth)
	}
	c, err := a.Capture(ctx, psp.CaptureRequest{OrderID: "cap_000000000000000000000007", MerchantOrderID: held.MerchantOrderID,
		ChargeReference: auth.Reference, Amount: 5000, Currency: "KRW"})
	if err != nil || c.Status != psp.Succeeded || c.AmountCaptured != 5000 {
		t.Fatalf("Capture = %+v, %v; want 5000 captured", c, err)
	}
	r := psp.RefundRequest{RefundOrderID: "rfd_000000000000000000000007", MerchantOrderID: held.MerchantOrderID,
		ChargeReference: auth.Reference, Amount: 5000, Currency: "KRW"}
	if got, err := a.Refund(ctx, r); err != nil || got.Status != psp.RefundSucceeded {
		t.Fatalf("Refund of the capture = %+v, %v", got, err)
	}
	if got, err := a.Void(ctx, psp.VoidRequest{OrderID: "vod_000000000000000000000007", MerchantOrderID: held.MerchantOrderID,
		ChargeReference: auth.Reference, Reason: "duplicate"}); err != nil || got.Status != psp.Succeeded || got.AmountCaptured != 5000 {
		t.Fatalf("Void of a captured charge = %+v, %v; want the capture", got, err)
	}
	held.MerchantOrderID, held.Currency, held.Amount = "ord_000000000000000000000008", "USD", 2500
	auth, err = a.Charge(ctx, held)
	if err != nil || auth.Status != psp.Authorized {
		t.Fatalf("Charge(manual) = %+v, %v", auth, err)
	}
	if got, err := a.Void(ctx, psp.VoidRequest{OrderID: "vod_000000000000000000000008", MerchantOrderID: held.MerchantOrderID,
		ChargeReference: auth.Reference, Reason: "authorization_expired"}); err != nil || got.Status != psp.Voided {
		t.Fatalf("Void = %+v, %v; want voided", got, err)
	}
	if got, err := a.Capture(ctx, psp.CaptureRequest{OrderID: "cap_000000000000000000000008", MerchantOrderID: held.MerchantOrderID,
		ChargeReference: auth.Reference, Amount: 2500, Currency: "USD"}); err != nil || got.Status != psp.Voided {
		t.Fatalf("Capture of a voided charge = %+v, %v; want voided", got, err)
	}

	// The ledger, a line or two a page: both lists read down
	// (starting_after) and up (ending_before), in the period of the
	// objects' created (stripe-mock's fixtures all share one).
	from, to := shim.period()
	var lines []psp.Transaction
	q := psp.LedgerQuery{From: from, To: to, Limit: 2}
	for range 100 {
		page, err := a.ListTransactions(ctx, q)
		if err != nil {
			t.Fatalf("ListTransactions(cursor %q): %v", q.Cursor, err)
		}
		lines = append(lines, page.Transactions...)
		if q.Cursor = page.Next; q.Cursor == "" {
			break
		}
	}
	byKind := map[psp.TransactionKind]int{}
	for _, l := range lines {
		byKind[l.Kind]++
		named := l.MerchantOrderID == charges[0].MerchantOrderID || l.MerchantOrderID == charges[1].MerchantOrderID
		if l.Kind == psp.TransactionCharge && (l.MerchantID == "mer_1") != named {
			t.Errorf("charge line %+v: the merchant sent is not the merchant read back", l)
		}
		if l.Kind == psp.TransactionRefund && (l.ChargeReference == "" || l.MerchantOrderID == "") {
			t.Errorf("refund line %+v does not name its charge", l)
		}
	}
	if byKind[psp.TransactionCharge] != len(shim.order) || byKind[psp.TransactionRefund] != len(shim.allRefunds) {
		t.Errorf("the ledger listed %v, want %d charges and %d refunds", byKind, len(shim.order), len(shim.allRefunds))
	}

	shim.mu.Lock()
	defer shim.mu.Unlock()
	kinds := map[string]int{}
	for _, x := range shim.exchanges {
		kinds[x.kind]++
		if x.status != http.StatusOK {
			t.Errorf("stripe-mock refused %s %s: %d %s\nform: %s", x.method, x.path, x.status, x.body, x.form)
		}
		if strings.HasPrefix(x.kind, "list all") {
			for _, dir := range []string{"starting_after", "ending_before"} {
				if strings.Contains(x.query, dir+"=") {
					kinds[x.kind+" "+dir]++
				}
			}
		}
	}
	for _, k := range []string{"create payment intent", "search payment intents", "create refund", "list refunds", "cancel payment intent",
		"capture payment intent", "retrieve payment intent",
		"list all payment intents starting_after", "list all payment intents ending_before",
		"list all refunds starting_after", "list all refunds ending_before"} {
		if kinds[k] == 0 {
			t.Errorf("no %s request reached stripe-mock: %v", k, kinds)
		}
	}
	t.Logf("stripe-mock accepted %d requests: %v", len(shim.exchanges), kinds)
}

// stripeMock returns the base URL of a stripe-mock, starting the binary
// STRIPE_MOCK_BIN names, or skips.
func stripeMock(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("STRIPE_MOCK_URL"); u != "" {
		return strings.TrimRight(u, "/")
	}
	bin := os.Getenv("STRIPE_MOCK_BIN")
	if bin == "" {
		t.Skip("stripe-mock not configured (STRIPE_MOCK_BIN or STRIPE_MOCK_URL); `make stripe-mock-test` builds and runs it")
	}
	// Both listeners on ports the system picks: given neither, stripe-mock
	// binds its default port, which another run may hold.
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// It says where it listens once it does.
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("stripe-mock did not say where it listens within 30s")
	}
	return ""
}

// exchange is one request the shim forwarded and stripe-mock's raw answer.
type exchange struct {
	kind, method, path, query, form string
	status                          int
	body                            []byte
}

// mockShim forwards each request to stripe-mock, checks that its answer
// reads as the SDK's type, and hands the adapter that answer with this
// request's ids, amounts and statuses written in.
type mockShim struct {
	t    *testing.T
	base string

	mu         sync.Mutex
	exchanges  []exchange
	currencies map[string]string           // payment intent id → currency
	refunds    map[string][]map[string]any // payment intent id → refunds made
	decline    map[string]bool             // order ids whose create answers a decline
	pis        map[string]map[string]any   // payment intent id → as answered
	order      []string                    // payment intent ids, oldest first
	allRefunds []map[string]any            // every refund made, oldest first
}

// period is a period that holds every object the shim knows, by created.
func (s *mockShim) period() (from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := int64(1<<62), int64(0)
	for _, m := range append(s.allRefunds, mapsOf(s.pis)...) {
		c := createdOf(m)
		lo, hi = min(lo, c), max(hi, c)
	}
	return time.Unix(lo, 0), time.Unix(hi+1, 0)
}

// createdOf is an object's created, as stripe-mock answered it.
func createdOf(m map[string]any) int64 {
	c, _ := m["created"].(float64)
	return int64(c)
}

func mapsOf(m map[string]map[string]any) []map[string]any {
	var out []map[string]any
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// page answers a list of objs (oldest first) as Stripe does: newest first,
// created[gte] and created[lt], limit, starting_after or ending_before,
// has_more.
func (s *mockShim) page(objs []map[string]any, q url.Values) (data []any, more bool) {
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	lt, _ := strconv.ParseInt(q.Get("created[lt]"), 10, 64)
	limit, _ := strconv.Atoi(q.Get("limit"))
	var list []map[string]any
	for i := len(objs) - 1; i >= 0; i-- {
		if c := createdOf(objs[i]); c >= gte && c < lt {
			list = append(list, objs[i])
		}
	}
	at := func(id string) int {
		for i, m := range list {
			if m["id"] == id {
				return i
			}
		}
		s.t.Errorf("the adapter paged from %s, which the list does not hold", id)
		return 0
	}
	var pg []map[string]any
	switch {
	case q.Get("starting_after") != "":
		rest := list[at(q.Get("starting_after"))+1:]
		pg, more = rest[:min(limit, len(rest))], len(rest) > limit
	case q.Get("ending_before") != "":
		newer := list[:at(q.Get("ending_before"))]
		pg, more = newer[max(0, len(newer)-limit):], len(newer) > limit
	default:
		pg, more = list[:min(limit, len(list))], len(list) > limit
	}
	for _, m := range pg {
		data = append(data, m)
	}
	return data, more
}

func (s *mockShim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req, err := http.NewRequestWithContext(r.Context(), r.Method, s.base+r.URL.RequestURI(), bytes.NewReader(raw))
	if err != nil {
		s.t.Error(err)
		return
	}
	for _, h := range []string{"Authorization", "Content-Type", "Idempotency-Key", "Stripe-Version", "User-Agent"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Errorf("stripe-mock: %v", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	form, _ := url.ParseQuery(string(raw))

	x := exchange{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, form: string(raw), status: res.StatusCode, body: body}
	ok := res.StatusCode == http.StatusOK // a refusal goes back as it is
	var answer any
	id, action := piPath(r.URL.Path)
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
		x.kind = "create payment intent"
		if ok {
			answer = s.createPI(body, form)
		}
	case r.Method == http.MethodPost && action == "cancel":
		x.kind = "cancel payment intent"
		if ok {
			answer = s.cancelPI(body, id, form)
		}
	case r.Method == http.MethodPost && action == "capture":
		x.kind = "capture payment intent"
		if ok {
			answer = s.capturePI(body, id, form)
		}
	case r.Method == http.MethodGet && id != "" && action == "":
		x.kind = "retrieve payment intent"
		if ok {
			answer = s.retrievePI(body, id)
		}
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents/search":
		x.kind = "search payment intents"
		if ok {
			answer = s.searchPI(body, r.URL.Query().Get("query"))
		}
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		x.kind = "create refund"
		if ok {
			answer = s.createRefund(body, form)
		}
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds" && r.URL.Query().Has("payment_intent"):
		x.kind = "list refunds"
		if ok {
			answer = s.listRefunds(body, r.URL.Query().Get("payment_intent"))
		}
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds":
		x.kind = "list all refunds"
		if ok {
			answer = s.listAllRefunds(body, r.URL.Query())
		}
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents":
		x.kind = "list all payment intents"
		if ok {
			answer = s.listAllPIs(body, r.URL.Query())
		}
	default:
		s.t.Errorf("the adapter sent an unexpected %s %s", r.Method, r.URL.Path)
	}
	s.mu.Lock()
	s.exchanges = append(s.exchanges, x)
	s.mu.Unlock()
	if answer == nil {
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(body)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if refusal, ok := answer.(unexpectedState); ok {
		// stripe-mock accepted the request; Stripe, which keeps state,
		// would refuse it.
		stripetest.Error(w, http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state", "", string(refusal))
		return
	}
	_ = json.NewEncoder(w).Encode(answer)
}

// unexpectedState is the shim's answer, in Stripe's place, to a capture or
// cancel of a PaymentIntent whose status does not allow it.
type unexpectedState string

// piPath splits /v1/payment_intents/{id}[/{action}].
func piPath(path string) (id, action string) {
	rest, ok := strings.CutPrefix(path, "/v1/payment_intents/")
	if !ok || rest == "search" {
		return "", ""
	}
	id, action, _ = strings.Cut(rest, "/")
	return id, action
}

// captureBefore is an authorization's deadline, a week on.
func captureBefore() int64 { return time.Now().Add(7 * 24 * time.Hour).Unix() }

// patchCharge gives an expanded latest charge of an authorization its
// capture_before.
func patchCharge(m map[string]any) {
	ch, ok := m["latest_charge"].(map[string]any)
	if !ok {
		return
	}
	if pmd, ok := ch["payment_method_details"].(map[string]any); ok {
		if card, ok := pmd["card"].(map[string]any); ok && m["status"] == "requires_capture" {
			card["capture_before"] = captureBefore()
		}
	}
}

// current is stripe-mock's answer m (a PaymentIntent) made the PaymentIntent
// was as the shim knows it: its ids, amounts and status. The caller holds mu.
func (s *mockShim) current(m map[string]any, id string) map[string]any {
	was, ok := s.pis[id]
	if !ok {
		s.t.Errorf("the adapter asked about payment intent %s, which it never created", id)
		return m
	}
	for _, k := range []string{"id", "amount", "currency", "metadata", "last_payment_error", "status", "capture_method",
		"amount_received", "amount_capturable", "cancellation_reason", "next_action"} {
		m[k] = was[k]
	}
	patchCharge(m)
	return m
}

// parse reads stripe-mock's answer as the SDK's type v and as a map to
// patch; an answer that does not read fails the test.
func (s *mockShim) parse(body []byte, v any) map[string]any {
	s.t.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		s.t.Errorf("stripe-mock's answer does not read as %T: %v\n%.300s", v, err, body)
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		s.t.Errorf("stripe-mock's answer is not an object: %v", err)
		return nil
	}
	return m
}

func (s *mockShim) createPI(body []byte, form url.Values) any {
	var pi sdk.PaymentIntent
	m := s.parse(body, &pi)
	if m == nil {
		return nil
	}
	if pi.ID == "" || pi.Object != "payment_intent" {
		s.t.Errorf("stripe-mock answered a create with %+v", pi)
	}
	// stripe-mock echoes amount and currency; it keeps its fixture's status.
	if fmt.Sprint(pi.Amount) != form.Get("amount") || string(pi.Currency) != form.Get("currency") {
		s.t.Errorf("stripe-mock did not echo amount %s %s: %d %s", form.Get("amount"), form.Get("currency"), pi.Amount, pi.Currency)
	}
	m["metadata"], m["status"], m["last_payment_error"], m["next_action"] = stripetest.FormMetadata(form), "succeeded", nil, nil
	m["amount_received"], m["amount_capturable"], m["capture_method"] = pi.Amount, 0, "automatic"
	if form.Get("capture_method") == "manual" {
		m["status"], m["amount_received"], m["amount_capturable"], m["capture_method"] = "requires_capture", 0, pi.Amount, "manual"
		if _, expanded := m["latest_charge"].(map[string]any); !expanded {
			s.t.Errorf("stripe-mock did not expand the latest charge of a manual capture: %.300s", body)
		}
		patchCharge(m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.decline[form.Get("metadata[merchant_order_id]")] {
		m["status"] = "requires_payment_method"
		m["last_payment_error"] = map[string]any{"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds"}
	}
	s.currencies[pi.ID] = form.Get("currency")
	s.pis[pi.ID] = m
	s.order = append(s.order, pi.ID)
	return m
}

// cancelPI checks stripe-mock's answer to a cancel and gives it the
// PaymentIntent it canceled, canceled, its last error kept.
func (s *mockShim) cancelPI(body []byte, id string, form url.Values) any {
	var pi sdk.PaymentIntent
	m := s.parse(body, &pi)
	if m == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	was, ok := s.pis[id]
	if !ok {
		s.t.Errorf("the adapter canceled payment intent %s, which it never created", id)
		return nil
	}
	switch was["status"] {
	case "succeeded", "canceled", "processing":
		return unexpectedState(fmt.Sprintf("You cannot cancel this PaymentIntent because it has a status of %s.", was["status"]))
	}
	was["status"], was["cancellation_reason"], was["amount_capturable"] = "canceled", form.Get("cancellation_reason"), 0
	return s.current(m, id)
}

// capturePI checks stripe-mock's answer to a capture and gives it the
// PaymentIntent it captured, with amount_to_capture received; a
// PaymentIntent that waits for no capture is refused, as Stripe would.
func (s *mockShim) capturePI(body []byte, id string, form url.Values) any {
	var pi sdk.PaymentIntent
	m := s.parse(body, &pi)
	if m == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	was, ok := s.pis[id]
	if !ok {
		s.t.Errorf("the adapter captured payment intent %s, which it never created", id)
		return nil
	}
	if was["status"] != "requires_capture" {
		return unexpectedState(fmt.Sprintf("This PaymentIntent could not be captured because it has a status of %s.", was["status"]))
	}
	amount, err := strconv.ParseInt(form.Get("amount_to_capture"), 10, 64)
	if err != nil {
		s.t.Errorf("capture of %s without amount_to_capture: %s", id, form.Encode())
	}
	md := was["metadata"].(map[string]any)
	for k, v := range stripetest.FormMetadata(form) {
		md[k] = v
	}
	was["status"], was["amount_received"], was["amount_capturable"] = "succeeded", amount, 0
	return s.current(m, id)
}

// retrievePI checks stripe-mock's answer to a retrieval and gives it the
// PaymentIntent as the shim knows it.
func (s *mockShim) retrievePI(body []byte, id string) any {
	var pi sdk.PaymentIntent
	m := s.parse(body, &pi)
	if m == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current(m, id)
}

func (s *mockShim) searchPI(body []byte, query string) any {
	var res sdk.PaymentIntentSearchResult
	m := s.parse(body, &res)
	if m == nil {
		return nil
	}
	data, _ := m["data"].([]any)
	if len(data) == 0 {
		s.t.Errorf("stripe-mock's search answered no payment intent: %.300s", body)
		return nil
	}
	pi := data[0].(map[string]any)
	order := strings.TrimSuffix(strings.TrimPrefix(query, "metadata['merchant_order_id']:'"), "'")
	pi["metadata"], pi["status"], pi["last_payment_error"], pi["next_action"] = map[string]any{"merchant_order_id": order}, "succeeded", nil, nil
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, was := range s.pis {
		if was["metadata"].(map[string]any)["merchant_order_id"] == order {
			pi = s.current(pi, id)
		}
	}
	m["data"], m["has_more"], m["next_page"] = []any{pi}, false, nil
	return m
}

func (s *mockShim) createRefund(body []byte, form url.Values) any {
	var rf sdk.Refund
	m := s.parse(body, &rf)
	if m == nil {
		return nil
	}
	if rf.ID == "" || rf.Object != "refund" {
		s.t.Errorf("stripe-mock answered a refund with %+v", rf)
	}
	piID := form.Get("payment_intent")
	s.mu.Lock()
	defer s.mu.Unlock()
	m["metadata"], m["status"], m["payment_intent"] = stripetest.FormMetadata(form), "succeeded", piID
	m["amount"], _ = json.Number(form.Get("amount")).Int64()
	m["currency"] = s.currencies[piID]
	s.refunds[piID] = append(s.refunds[piID], m)
	s.allRefunds = append(s.allRefunds, m)
	return m
}

// listAllPIs checks stripe-mock's answer to a list of PaymentIntents and
// gives it the page of the shim's PaymentIntents the request asks for.
func (s *mockShim) listAllPIs(body []byte, q url.Values) any {
	var list sdk.PaymentIntentList
	m := s.parse(body, &list)
	if m == nil {
		return nil
	}
	if m["object"] != "list" || len(list.Data) == 0 || list.Data[0].Object != "payment_intent" {
		s.t.Errorf("stripe-mock answered a payment intent list with %.300s", body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pis := make([]map[string]any, 0, len(s.order))
	for _, id := range s.order {
		pis = append(pis, s.current(s.pis[id], id))
	}
	m["data"], m["has_more"] = s.page(pis, q)
	return m
}

// listAllRefunds checks stripe-mock's answer to a list of refunds, its
// PaymentIntents expanded as asked, and gives it the page of the shim's
// refunds the request asks for.
func (s *mockShim) listAllRefunds(body []byte, q url.Values) any {
	var list sdk.RefundList
	m := s.parse(body, &list)
	if m == nil {
		return nil
	}
	if m["object"] != "list" || len(list.Data) == 0 || list.Data[0].PaymentIntent == nil || list.Data[0].PaymentIntent.Object != "payment_intent" {
		s.t.Errorf("stripe-mock did not answer a refund list with its payment intents expanded: %.300s", body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data, more := s.page(s.allRefunds, q)
	for i, rf := range data {
		out := map[string]any{}
		for k, v := range rf.(map[string]any) {
			out[k] = v
		}
		out["payment_intent"] = s.pis[fmt.Sprint(out["payment_intent"])]
		data[i] = out
	}
	m["data"], m["has_more"] = data, more
	return m
}

func (s *mockShim) listRefunds(body []byte, piID string) any {
	var list sdk.RefundList
	m := s.parse(body, &list)
	if m == nil {
		return nil
	}
	if m["object"] != "list" {
		s.t.Errorf("stripe-mock answered a refund list with %.300s", body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data := []any{}
	for _, rf := range s.refunds[piID] {
		data = append(data, rf)
	}
	m["data"], m["has_more"] = data, false
	return m
}
