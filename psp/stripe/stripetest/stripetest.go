// Package stripetest owns a fake Stripe API for tests: the part of Stripe's
// HTTP API the adapter (package psp/stripe) uses, answering as Stripe
// documents, so that the adapter's tests and the gateway's own can run
// against Stripe's answer shapes without a network.
package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server reproduces the part of Stripe's API the adapter uses, as
// documented: form-encoded PaymentIntent creation with confirm=true (and
// capture_method=manual: an authorization, requires_capture, until a
// capture or cancel, or Lapse), search by metadata, retrieval by id,
// capture (once, of at most amount_capturable; the rest is released),
// cancellation, refunds (of what was received) and their list, expansion of
// latest_charge (its payment_method_details.card.capture_before 7 days on),
// Bearer auth, idempotency keys (a repeat replays the first answer, 5xx
// included; other parameters are an idempotency_error) and the
// {"error":{type,code,decline_code,message}} bodies.
//
// It lists PaymentIntents (GET /v1/payment_intents) and refunds (GET
// /v1/refunds without payment_intent) as Stripe does: newest first (by
// created, then by creation), filtered by created[gt|gte|lt|lte], limit 10
// unless set (1 to 100), paged by starting_after (the page after an object,
// older) or ending_before (the page just before it, newer, still newest
// first), with has_more; expand[]=data.payment_intent expands a refund's
// PaymentIntent. An object's created is the clock's second (SetClock); with
// no clock set it is now plus the object's sequence number, in seconds, so
// that every object is newer than the one before.
//
// Test PaymentMethods behave as Stripe's: pm_card_visa succeeds,
// pm_card_chargeDeclined is declined (generic_decline),
// pm_card_chargeDeclinedInsufficientFunds for insufficient_funds,
// pm_card_chargeDeclinedLostCard for lost_card, pm_card_authenticationRequired
// needs 3-D Secure (requires_action, or a 402 authentication_required under
// error_on_requires_action); pm_fake_amountTooSmall stands for a request
// Stripe refuses as invalid (amount_too_small); any other id does not exist.
// Amounts follow Stripe's units: ISK and UGX must be multiples of 100 and the
// three-decimal currencies end in 0 (invalid_charge_amount otherwise).
type Server struct {
	key string

	mu       sync.Mutex
	pis      map[string]map[string]any // id → PaymentIntent
	charges  map[string]map[string]any // id → Charge, a PaymentIntent's latest
	refunds  []map[string]any
	captures []map[string]any // every capture made: payment_intent, amount, metadata
	canceled map[string]int   // idempotency key → cancels it made
	idem     map[string]idemRecord
	seq      int
	requests []*http.Request
	// searchLag hides new PaymentIntents from search until index is called.
	searchLag bool
	indexed   map[string]bool
	// failNextCreate makes the next create act and then answer a (cached) 500.
	failNextCreate bool
	// refundsPending makes new refunds pending until FinishRefund.
	refundsPending bool
	events         int
	cancels        int
	// now, when set, is the clock objects are created by.
	now func() time.Time
}

type idemRecord struct {
	params string
	status int
	body   []byte
}

// New returns a Server that accepts the secret key key.
func New(key string) *Server {
	return &Server{key: key, pis: map[string]map[string]any{}, charges: map[string]map[string]any{}, canceled: map[string]int{},
		idem: map[string]idemRecord{}, indexed: map[string]bool{}}
}

// ServeHTTP implements http.Handler.
func (f *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := r.ParseForm(); err != nil {
		Error(w, 400, "invalid_request_error", "", "", "bad form")
		return
	}
	f.requests = append(f.requests, r)
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		Error(w, 401, "invalid_request_error", "", "", "Invalid API Key provided")
		return
	}
	if key := r.Header.Get("Idempotency-Key"); r.Method == http.MethodPost && key != "" {
		params := r.URL.Path + "?" + r.PostForm.Encode() // Encode sorts by key
		if rec, ok := f.idem[key]; ok {
			if rec.params != params {
				Error(w, 400, "idempotency_error", "", "",
					"Keys for idempotent requests can only be used with the same parameters they were first used with.")
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			writeRaw(w, rec.status, rec.body)
			return
		}
		status, body, save := f.route(r)
		if save {
			f.idem[key] = idemRecord{params, status, body}
		}
		writeRaw(w, status, body)
		return
	}
	status, body, _ := f.route(r)
	writeRaw(w, status, body)
}

// route answers one request; save says whether Stripe keeps the answer for
// the idempotency key (not for a request that failed validation).
func (f *Server) route(r *http.Request) (int, []byte, bool) {
	expand := expansions(r.Form)
	id, action := piPath(r.URL.Path)
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
		return f.createPI(r.PostForm, expand)
	case r.Method == http.MethodPost && action == "cancel":
		return f.cancel(id, r.PostForm.Get("cancellation_reason"), r.Header.Get("Idempotency-Key"), expand)
	case r.Method == http.MethodPost && action == "capture":
		return f.capture(id, r.PostForm, expand)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents/search":
		return f.search(r.Form.Get("query"), expand)
	case r.Method == http.MethodGet && id != "" && action == "":
		return f.retrieve(id, expand)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		return f.createRefund(r.PostForm)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds" && r.Form.Has("payment_intent"):
		return f.listRefunds(r.Form.Get("payment_intent"))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds":
		return f.listAll("refund", f.refunds, r.Form, expand)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents":
		pis := make([]map[string]any, 0, len(f.pis))
		for _, pi := range f.pis {
			pis = append(pis, pi)
		}
		return f.listAll("payment_intent", pis, r.Form, expand)
	}
	s, b := errorBody(404, "invalid_request_error", "", "", "Unrecognized request URL")
	return s, b, false
}

// piPath splits /v1/payment_intents/{id}[/{action}].
func piPath(path string) (id, action string) {
	rest, ok := strings.CutPrefix(path, "/v1/payment_intents/")
	if !ok || rest == "search" {
		return "", ""
	}
	id, action, _ = strings.Cut(rest, "/")
	return id, action
}

// expansions reads the expand[] fields of a request (expand[0]=…, as the
// SDK writes them, or expand[]=…).
func expansions(form url.Values) map[string]bool {
	ex := map[string]bool{}
	for k, v := range form {
		if strings.HasPrefix(k, "expand[") {
			for _, f := range v {
				ex[f] = true
			}
		}
	}
	return ex
}

// render is pi as answered: its latest charge expanded into the charge
// object when asked (prefix "data." in a search).
func (f *Server) render(pi map[string]any, expand map[string]bool, prefix string) map[string]any {
	if !expand[prefix+"latest_charge"] {
		return pi
	}
	ch, ok := f.charges[fmt.Sprint(pi["latest_charge"])]
	if !ok {
		return pi
	}
	out := make(map[string]any, len(pi))
	for k, v := range pi {
		out[k] = v
	}
	out["latest_charge"] = ch
	return out
}

func (f *Server) marshal(pi map[string]any, expand map[string]bool) []byte {
	b, _ := json.Marshal(f.render(pi, expand, ""))
	return b
}

// authorizationValidity is how long an authorization stays capturable.
const authorizationValidity = 7 * 24 * time.Hour

// FormMetadata reads the metadata[…] fields of a form-encoded request.
func FormMetadata(form url.Values) map[string]any {
	md := map[string]any{}
	for k, v := range form {
		if name, ok := strings.CutPrefix(k, "metadata["); ok {
			md[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	return md
}

func (f *Server) createPI(form url.Values, expand map[string]bool) (int, []byte, bool) {
	amount, err := strconv.ParseInt(form.Get("amount"), 10, 64)
	if err != nil || amount <= 0 || form.Get("currency") == "" || form.Get("currency") != strings.ToLower(form.Get("currency")) {
		s, b := errorBody(400, "invalid_request_error", "parameter_invalid_integer", "amount", "Invalid amount or currency")
		return s, b, false
	}
	switch cur := form.Get("currency"); {
	case (cur == "isk" || cur == "ugx") && amount%100 != 0,
		(cur == "bhd" || cur == "jod" || cur == "kwd" || cur == "omr" || cur == "tnd") && amount%10 != 0:
		s, b := errorBody(400, "invalid_request_error", "invalid_charge_amount", "amount", "Invalid amount for "+cur)
		return s, b, false
	}
	if form.Get("confirm") != "true" || form.Get("automatic_payment_methods[allow_redirects]") != "never" {
		s, b := errorBody(400, "invalid_request_error", "parameter_missing", "return_url",
			"confirm=true needs automatic_payment_methods[allow_redirects]=never here")
		return s, b, false
	}
	errorOnAction := form.Get("error_on_requires_action") == "true"
	pm := form.Get("payment_method")
	var declineCode, message string
	needsAction := false
	switch pm {
	case "pm_card_visa":
	case "pm_card_chargeDeclined":
		declineCode, message = "generic_decline", "Your card was declined."
	case "pm_card_chargeDeclinedInsufficientFunds":
		declineCode, message = "insufficient_funds", "Your card has insufficient funds."
	case "pm_card_chargeDeclinedLostCard":
		declineCode, message = "lost_card", "Your card was declined."
	case "pm_card_authenticationRequired":
		needsAction = true
	case "pm_fake_amountTooSmall":
		s, b := errorBody(400, "invalid_request_error", "amount_too_small", "amount", "Amount must be at least $0.50 usd")
		return s, b, false
	default:
		s, b := errorBody(400, "invalid_request_error", "resource_missing", "payment_method", "No such PaymentMethod: '"+pm+"'")
		return s, b, false
	}
	manual := false
	switch form.Get("capture_method") {
	case "", "automatic":
	case "manual":
		manual = true
	default:
		s, b := errorBody(400, "invalid_request_error", "parameter_invalid_string", "capture_method", "Invalid capture_method")
		return s, b, false
	}
	f.seq++
	created := f.created()
	pi := map[string]any{
		"id": fmt.Sprintf("pi_%d", f.seq), "object": "payment_intent", "amount": amount, "currency": form.Get("currency"),
		"created": created, "metadata": FormMetadata(form), "description": form.Get("description"),
		"payment_method": pm, "latest_charge": fmt.Sprintf("ch_%d", f.seq), "last_payment_error": nil, "status": "succeeded",
		"amount_refunded": int64(0), "amount_received": amount, "amount_capturable": int64(0), "capture_method": "automatic",
	}
	ch := map[string]any{"id": pi["latest_charge"], "object": "charge", "amount": amount, "currency": form.Get("currency"),
		"payment_intent": pi["id"], "captured": true, "amount_captured": amount,
		"payment_method_details": map[string]any{"type": "card", "card": map[string]any{"brand": "visa"}}}
	if manual {
		pi["capture_method"] = "manual"
		f.authorize(pi, ch, created)
	}
	f.pis[pi["id"].(string)] = pi
	f.charges[ch["id"].(string)] = ch
	if !f.searchLag {
		f.indexed[pi["id"].(string)] = true
	}
	if f.failNextCreate {
		f.failNextCreate = false
		s, b := errorBody(500, "api_error", "", "", "An unknown error occurred")
		return s, b, true
	}
	pi["client_secret"] = pi["id"].(string) + "_secret_fake"
	if needsAction && !errorOnAction {
		pi["status"], pi["amount_received"], pi["amount_capturable"] = "requires_action", int64(0), int64(0)
		pi["next_action"] = map[string]any{"type": "use_stripe_sdk", "use_stripe_sdk": map[string]any{"type": "three_d_secure_redirect"}}
		return 200, f.marshal(pi, expand), true
	}
	code := "card_declined"
	if needsAction {
		code, declineCode, message = "authentication_required", "authentication_required", "Your card was declined. This transaction requires authentication."
	}
	if declineCode == "" {
		return 200, f.marshal(pi, expand), true
	}
	lpe := map[string]any{"type": "card_error", "code": code, "decline_code": declineCode, "message": message, "charge": pi["latest_charge"]}
	pi["status"], pi["last_payment_error"] = "requires_payment_method", lpe
	pi["amount_received"], pi["amount_capturable"] = int64(0), int64(0)
	e := map[string]any{}
	for k, v := range lpe {
		e[k] = v
	}
	e["payment_intent"] = pi
	b, _ := json.Marshal(map[string]any{"error": e})
	return 402, b, true
}

// authorize makes pi an authorization of its whole amount, capturable until
// a week after at.
func (f *Server) authorize(pi, ch map[string]any, at int64) {
	pi["status"], pi["amount_received"], pi["amount_capturable"] = "requires_capture", int64(0), pi["amount"]
	ch["captured"], ch["amount_captured"] = false, int64(0)
	ch["payment_method_details"].(map[string]any)["card"].(map[string]any)["capture_before"] = at + int64(authorizationValidity/time.Second)
}

// capture captures a PaymentIntent in requires_capture once, as Stripe
// does: amount_to_capture (all of amount_capturable when absent) is
// received, the rest released; any other status answers
// payment_intent_unexpected_state.
func (f *Server) capture(id string, form url.Values, expand map[string]bool) (int, []byte, bool) {
	pi, ok := f.pis[id]
	if !ok {
		s, b := errorBody(404, "invalid_request_error", "resource_missing", "intent", "No such payment_intent: '"+id+"'")
		return s, b, false
	}
	if pi["status"] != "requires_capture" {
		s, b := errorBody(400, "invalid_request_error", "payment_intent_unexpected_state", "",
			fmt.Sprintf("This PaymentIntent could not be captured because it has a status of %s. Only a PaymentIntent with one of the following statuses may be captured: requires_capture.", pi["status"]))
		return s, b, true
	}
	capturable := pi["amount_capturable"].(int64)
	amount := capturable
	if v := form.Get("amount_to_capture"); v != "" {
		var err error
		if amount, err = strconv.ParseInt(v, 10, 64); err != nil || amount <= 0 {
			s, b := errorBody(400, "invalid_request_error", "parameter_invalid_integer", "amount_to_capture", "Invalid integer: "+v)
			return s, b, false
		}
	}
	if amount > capturable {
		s, b := errorBody(400, "invalid_request_error", "amount_too_large", "amount_to_capture",
			fmt.Sprintf("The amount to capture (%d) must be less than or equal to the amount capturable (%d).", amount, capturable))
		return s, b, false
	}
	md := pi["metadata"].(map[string]any)
	for k, v := range FormMetadata(form) {
		md[k] = v
	}
	pi["status"], pi["amount_received"], pi["amount_capturable"] = "succeeded", amount, int64(0)
	ch := f.charges[pi["latest_charge"].(string)]
	ch["captured"], ch["amount_captured"] = true, amount
	f.captures = append(f.captures, map[string]any{"payment_intent": id, "amount": amount, "metadata": FormMetadata(form)})
	return 200, f.marshal(pi, expand), true
}

// Lapse lets the authorization of the order's PaymentIntent expire, as
// Stripe does at capture_before: it is canceled, cancellation_reason
// automatic.
func (f *Server) Lapse(orderID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pi := range f.pis {
		if pi["metadata"].(map[string]any)["merchant_order_id"] == orderID && pi["status"] == "requires_capture" {
			pi["status"], pi["cancellation_reason"], pi["amount_capturable"] = "canceled", "automatic", int64(0)
			pi["canceled_at"] = time.Now().Unix()
			return
		}
	}
	panic("no payment intent of " + orderID + " waits for its capture")
}

// Captures counts the captures made with metadata[capture_order_id]
// captureOrderID.
func (f *Server) Captures(captureOrderID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.captures {
		if c["metadata"].(map[string]any)["capture_order_id"] == captureOrderID {
			n++
		}
	}
	return n
}

// CancelsWithKey counts the PaymentIntents canceled by requests with the
// Idempotency-Key key (a replayed answer cancels nothing).
func (f *Server) CancelsWithKey(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.canceled[key]
}

// cancel cancels a PaymentIntent that has not succeeded, as Stripe does: a
// succeeded, processing or canceled one answers payment_intent_unexpected_state.
func (f *Server) cancel(id, reason, key string, expand map[string]bool) (int, []byte, bool) {
	pi, ok := f.pis[id]
	if !ok {
		s, b := errorBody(404, "invalid_request_error", "resource_missing", "intent", "No such payment_intent: '"+id+"'")
		return s, b, false
	}
	switch pi["status"] {
	case "requires_payment_method", "requires_confirmation", "requires_action", "requires_capture":
	default:
		s, b := errorBody(400, "invalid_request_error", "payment_intent_unexpected_state", "",
			fmt.Sprintf("You cannot cancel this PaymentIntent because it has a status of %s.", pi["status"]))
		return s, b, true
	}
	f.cancels++
	f.canceled[key]++
	pi["status"], pi["cancellation_reason"], pi["canceled_at"] = "canceled", reason, time.Now().Unix()
	pi["amount_capturable"] = int64(0)
	delete(pi, "next_action")
	return 200, f.marshal(pi, expand), true
}

// PayAgain is a browser that holds a declined PaymentIntent's client secret
// confirming it with another card, as Stripe.js may: it succeeds unless the
// PaymentIntent was canceled (false then).
func (f *Server) PayAgain(orderID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pi := range f.pis {
		if pi["metadata"].(map[string]any)["merchant_order_id"] == orderID && pi["status"] == "requires_payment_method" {
			pi["status"], pi["last_payment_error"], pi["amount_received"] = "succeeded", nil, pi["amount"]
			return true
		}
	}
	return false
}

// Contradict makes the order's PaymentIntent succeeded whatever it was,
// canceled included: a PSP acting after it gave a final answer, as a
// confused or compromised one might.
func (f *Server) Contradict(orderID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pi := range f.pis {
		if pi["metadata"].(map[string]any)["merchant_order_id"] == orderID {
			pi["status"], pi["last_payment_error"], pi["cancellation_reason"] = "succeeded", nil, nil
			pi["amount_received"], pi["amount_capturable"] = pi["amount"], int64(0)
			return
		}
	}
	panic("no payment intent for " + orderID)
}

// Cancels counts the PaymentIntents canceled.
func (f *Server) Cancels() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancels
}

func (f *Server) retrieve(id string, expand map[string]bool) (int, []byte, bool) {
	pi, ok := f.pis[id]
	if !ok {
		s, b := errorBody(404, "invalid_request_error", "resource_missing", "intent", "No such payment_intent: '"+id+"'")
		return s, b, false
	}
	return 200, f.marshal(pi, expand), false
}

var searchQuery = regexp.MustCompile(`^metadata\['([a-z_]+)'\]:'([^']*)'$`)

func (f *Server) search(query string, expand map[string]bool) (int, []byte, bool) {
	m := searchQuery.FindStringSubmatch(query)
	if m == nil {
		s, b := errorBody(400, "invalid_request_error", "", "query", "Invalid search query")
		return s, b, false
	}
	data := []any{}
	for _, id := range f.sortedIDs() {
		pi := f.pis[id]
		if f.indexed[id] && pi["metadata"].(map[string]any)[m[1]] == m[2] {
			data = append(data, f.render(pi, expand, "data."))
		}
	}
	b, _ := json.Marshal(map[string]any{"object": "search_result", "data": data, "has_more": false, "next_page": nil,
		"url": "/v1/payment_intents/search"})
	return 200, b, false
}

func (f *Server) sortedIDs() []string {
	ids := make([]string, 0, len(f.pis))
	for id := range f.pis {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (f *Server) createRefund(form url.Values) (int, []byte, bool) {
	pi, ok := f.pis[form.Get("payment_intent")]
	if !ok {
		s, b := errorBody(400, "invalid_request_error", "resource_missing", "payment_intent", "No such payment_intent: '"+form.Get("payment_intent")+"'")
		return s, b, false
	}
	if pi["status"] != "succeeded" {
		s, b := errorBody(400, "invalid_request_error", "", "", "This PaymentIntent does not have a successful charge to refund.")
		return s, b, true
	}
	left := pi["amount_received"].(int64) - pi["amount_refunded"].(int64)
	amount := left
	if v := form.Get("amount"); v != "" {
		amount, _ = strconv.ParseInt(v, 10, 64)
	}
	switch {
	case left == 0:
		s, b := errorBody(400, "invalid_request_error", "charge_already_refunded", "", "Charge "+pi["latest_charge"].(string)+" has already been refunded.")
		return s, b, true
	case amount > left:
		s, b := errorBody(400, "invalid_request_error", "", "amount",
			fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", amount, left))
		return s, b, true
	}
	pi["amount_refunded"] = pi["amount_refunded"].(int64) + amount
	f.seq++
	status := "succeeded"
	if f.refundsPending {
		status = "pending"
	}
	rf := map[string]any{"id": fmt.Sprintf("re_%d", f.seq), "object": "refund", "amount": amount, "currency": pi["currency"],
		"status": status, "payment_intent": pi["id"], "charge": pi["latest_charge"], "metadata": FormMetadata(form),
		"created": f.created()}
	f.refunds = append(f.refunds, rf)
	b, _ := json.Marshal(rf)
	return 200, b, true
}

func (f *Server) listRefunds(piID string) (int, []byte, bool) {
	if _, ok := f.pis[piID]; !ok {
		s, b := errorBody(404, "invalid_request_error", "resource_missing", "payment_intent", "No such payment_intent: '"+piID+"'")
		return s, b, false
	}
	data := []any{}
	for i := len(f.refunds) - 1; i >= 0; i-- { // newest first, as Stripe lists
		if f.refunds[i]["payment_intent"] == piID {
			data = append(data, f.refunds[i])
		}
	}
	b, _ := json.Marshal(map[string]any{"object": "list", "data": data, "has_more": false, "url": "/v1/refunds"})
	return 200, b, false
}

// created is the created of an object made now, the f.seq'th. The caller
// holds mu.
func (f *Server) created() int64 {
	if f.now != nil {
		return f.now().Unix()
	}
	return time.Now().Unix() + int64(f.seq)
}

// seqOf is the sequence number in an object's id (pi_12, re_13).
func seqOf(obj map[string]any) int {
	_, n, _ := strings.Cut(fmt.Sprint(obj["id"]), "_")
	i, _ := strconv.Atoi(n)
	return i
}

// listAll answers one page of a list of objects of type object, as the
// Server comment says.
func (f *Server) listAll(object string, objs []map[string]any, form url.Values, expand map[string]bool) (int, []byte, bool) {
	invalid := func(param, msg string) (int, []byte, bool) {
		s, b := errorBody(400, "invalid_request_error", "parameter_invalid_integer", param, msg)
		return s, b, false
	}
	limit := 10
	if v := form.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return invalid("limit", "Invalid limit: must be between 1 and 100")
		}
		limit = n
	}
	var bounds []func(created int64) bool
	for _, op := range []string{"gt", "gte", "lt", "lte"} {
		v := form.Get("created[" + op + "]")
		if v == "" {
			continue
		}
		b, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return invalid("created["+op+"]", "Invalid integer: "+v)
		}
		bounds = append(bounds, map[string]func(int64) bool{
			"gt":  func(c int64) bool { return c > b },
			"gte": func(c int64) bool { return c >= b },
			"lt":  func(c int64) bool { return c < b },
			"lte": func(c int64) bool { return c <= b },
		}[op])
	}
	var list []map[string]any
objects:
	for _, obj := range objs {
		for _, in := range bounds {
			if !in(obj["created"].(int64)) {
				continue objects
			}
		}
		list = append(list, obj)
	}
	sort.Slice(list, func(i, j int) bool { // newest first
		ci, cj := list[i]["created"].(int64), list[j]["created"].(int64)
		if ci != cj {
			return ci > cj
		}
		return seqOf(list[i]) > seqOf(list[j])
	})
	after, before := form.Get("starting_after"), form.Get("ending_before")
	if after != "" && before != "" {
		s, b := errorBody(400, "invalid_request_error", "", "", "You may only specify one of these parameters: starting_after, ending_before.")
		return s, b, false
	}
	at := func(id string) (int, bool) {
		for i, obj := range list {
			if obj["id"] == id {
				return i, true
			}
		}
		return 0, false
	}
	var page []map[string]any
	more := false
	switch {
	case after != "":
		i, ok := at(after)
		if !ok {
			s, b := errorBody(400, "invalid_request_error", "resource_missing", "starting_after", "No such "+object+": '"+after+"'")
			return s, b, false
		}
		rest := list[i+1:]
		page, more = rest[:min(limit, len(rest))], len(rest) > limit
	case before != "":
		i, ok := at(before)
		if !ok {
			s, b := errorBody(400, "invalid_request_error", "resource_missing", "ending_before", "No such "+object+": '"+before+"'")
			return s, b, false
		}
		newer := list[:i]
		page, more = newer[max(0, len(newer)-limit):], len(newer) > limit
	default:
		page, more = list[:min(limit, len(list))], len(list) > limit
	}
	data := make([]any, 0, len(page))
	for _, obj := range page {
		if object == "refund" && expand["data.payment_intent"] {
			out := make(map[string]any, len(obj))
			for k, v := range obj {
				out[k] = v
			}
			if pi, ok := f.pis[fmt.Sprint(obj["payment_intent"])]; ok {
				out["payment_intent"] = pi
			}
			obj = out
		}
		if object == "payment_intent" {
			obj = f.render(obj, expand, "data.")
		}
		data = append(data, obj)
	}
	path := "/v1/payment_intents"
	if object == "refund" {
		path = "/v1/refunds"
	}
	b, _ := json.Marshal(map[string]any{"object": "list", "data": data, "has_more": more, "url": path})
	return 200, b, false
}

// SetClock makes objects be created at the second now says, instead of
// each a second after the one before.
func (f *Server) SetClock(now func() time.Time) { f.set(func(f *Server) { f.now = now }) }

// Charges counts PaymentIntents for an order id (declined ones included).
func (f *Server) Charges(orderID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, pi := range f.pis {
		if pi["metadata"].(map[string]any)["merchant_order_id"] == orderID {
			n++
		}
	}
	return n
}

// RefundCount counts the refunds made for a refund order id.
func (f *Server) RefundCount(refundOrderID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, rf := range f.refunds {
		if rf["metadata"].(map[string]any)["refund_order_id"] == refundOrderID {
			n++
		}
	}
	return n
}

// Authenticate finishes 3-D Secure for the order's PaymentIntent, as the
// customer does in Stripe.js.
func (f *Server) Authenticate(orderID string, passed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pi := range f.pis {
		if pi["metadata"].(map[string]any)["merchant_order_id"] != orderID || pi["status"] != "requires_action" {
			continue
		}
		delete(pi, "next_action")
		pi["status"], pi["amount_received"] = "succeeded", pi["amount"]
		if pi["capture_method"] == "manual" {
			f.authorize(pi, f.charges[pi["latest_charge"].(string)], time.Now().Unix())
		}
		if !passed {
			pi["amount_received"], pi["amount_capturable"] = int64(0), int64(0)
			pi["status"] = "requires_payment_method"
			pi["last_payment_error"] = map[string]any{"type": "card_error", "code": "payment_intent_authentication_failure",
				"message": "We are unable to authenticate your payment method."}
		}
		return
	}
	panic("no payment intent waits for " + orderID)
}

// ForgetIdempotencyKeys models Stripe's 24-hour key lifetime.
func (f *Server) ForgetIdempotencyKeys() {
	f.set(func(f *Server) { f.idem = map[string]idemRecord{} })
}

// SetSearchLag hides new PaymentIntents from search until Index is called,
// as Stripe's eventually consistent search does for about a minute.
func (f *Server) SetSearchLag(on bool) { f.set(func(f *Server) { f.searchLag = on }) }

// FailNextCreate makes the next PaymentIntent creation act, then answer a
// 500 that Stripe keeps for its idempotency key.
func (f *Server) FailNextCreate() { f.set(func(f *Server) { f.failNextCreate = true }) }

// Requests returns every request received, in order (forms parsed).
func (f *Server) Requests() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*http.Request(nil), f.requests...)
}

// SetRefundsPending makes new refunds pending (as bank transfers' are)
// until FinishRefund settles them.
func (f *Server) SetRefundsPending(on bool) { f.set(func(f *Server) { f.refundsPending = on }) }

// FinishRefund settles the pending refund made for refundOrderID:
// "succeeded", or "failed" (its amount goes back to the PaymentIntent).
func (f *Server) FinishRefund(refundOrderID, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rf := range f.refunds {
		if rf["metadata"].(map[string]any)["refund_order_id"] != refundOrderID || rf["status"] != "pending" {
			continue
		}
		rf["status"] = status
		if status == "failed" {
			rf["failure_reason"] = "lost_or_stolen_card"
			pi := f.pis[rf["payment_intent"].(string)]
			pi["amount_refunded"] = pi["amount_refunded"].(int64) - rf["amount"].(int64)
		}
		return
	}
	panic("no pending refund " + refundOrderID)
}

// PaymentIntent is the id of the newest PaymentIntent of an order, "" when none.
func (f *Server) PaymentIntent(orderID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	last := ""
	for _, id := range f.sortedIDs() {
		if f.pis[id]["metadata"].(map[string]any)["merchant_order_id"] == orderID {
			last = id
		}
	}
	return last
}

// Event is the body of a webhook event of type typ about the object with
// id (a PaymentIntent pi_…, or a refund re_…), the object as it stands now:
// a snapshot, as Stripe sends it. Sign it with stripe-go's
// webhook.GenerateTestSignedPayload.
func (f *Server) Event(typ, id string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	obj, ok := f.pis[id]
	if !ok {
		for _, rf := range f.refunds {
			if rf["id"] == id {
				obj, ok = rf, true
			}
		}
	}
	if !ok {
		panic("no Stripe object " + id)
	}
	f.events++
	b, err := json.Marshal(map[string]any{"id": fmt.Sprintf("evt_%d", f.events), "object": "event", "api_version": "2025-08-27.basil",
		"created": time.Now().Unix(), "livemode": false, "pending_webhooks": 1, "type": typ, "data": map[string]any{"object": obj}})
	if err != nil {
		panic(err)
	}
	return b
}

// Index makes every PaymentIntent searchable, as time does.
func (f *Server) Index() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.pis {
		f.indexed[id] = true
	}
}

func (f *Server) set(fn func(f *Server)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func errorBody(status int, typ, code, param, msg string) (int, []byte) {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	if param != "" {
		e["param"] = param
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	return status, b
}

// Error writes one of Stripe's error answers.
func Error(w http.ResponseWriter, status int, typ, code, param, msg string) {
	s, b := errorBody(status, typ, code, param, msg)
	writeRaw(w, s, b)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_fake")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
