// Package tosstest owns a fake Toss Payments API for tests: the part of
// Toss's core API the adapter (package psp/toss) uses, answering as Toss
// documents, and the notifications (webhooks) Toss sends, so that the
// adapter's tests and the gateway's own run against Toss's answer shapes.
package tosstest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server reproduces the part of Toss Payments' core API the adapter uses,
// as documented for API version 2022-11-16: confirm, lookup by orderId and
// by paymentKey, cancel, the transactions listing, Basic auth with the
// secret key, the version header, Idempotency-Key replay, the {code,
// message} error bodies, and amounts written as numbers with a fraction
// part ("15000.0").
//
// The listing (GET /v1/transactions?startDate=&endDate=&startingAfter=&limit=)
// holds one transaction per approval (DONE, the payment's amount), per
// virtual account issued (WAITING_FOR_DEPOSIT, amount 0) and its deposit
// (DONE), and per cancel (CANCELED or PARTIAL_CANCELED, the cancel's amount
// and transactionKey), each at the server's clock (SetClock) cut to the
// millisecond, in the order of their times. startDate and endDate are Korean
// date-times, both inclusive ("2024-03-01T00:00:00.000", or a date alone:
// its midnight); limit is 100 unless set, at most 5,000; startingAfter is a
// transactionKey the listing holds, and the page starts after it. Anything
// else is refused 400 INVALID_REQUEST. transactionAt is written in +09:00,
// to the millisecond when it has one. Seeded payments have no transactions.
//
// Payments are created by the widget in real life; here a confirm for an
// unknown paymentKey that starts with "tgen_" creates it, and the paymentKey
// decides the answer: "_declined_" is refused by the card company,
// "_nofunds_" for lack of funds, "_points_" for card points the card cannot
// use, "_belowmin_" is refused as below Toss's minimum (nothing recorded),
// "_vbank_" issues a virtual account that waits for its deposit, anything
// else is approved.
type Server struct {
	secret string

	mu       sync.Mutex
	byKey    map[string]*Payment
	byOrder  map[string]string // orderId → paymentKey
	idem     map[string]recorded
	seq      int
	requests int
	now      func() time.Time
	txs      []Transaction // in the order they were made
}

// Transaction is Toss's Transaction object: one approval, deposit or cancel
// of a payment, as the listing answers it.
type Transaction struct {
	MID            string  `json:"mId"`
	TransactionKey string  `json:"transactionKey"`
	PaymentKey     string  `json:"paymentKey"`
	OrderID        string  `json:"orderId"`
	Method         string  `json:"method"`
	CustomerKey    *string `json:"customerKey"`
	UseEscrow      bool    `json:"useEscrow"`
	ReceiptURL     string  `json:"receiptUrl"`
	Status         string  `json:"status"`
	TransactionAt  string  `json:"transactionAt"`
	Currency       string  `json:"currency"`
	Amount         Won     `json:"amount"`

	at time.Time // TransactionAt, to the millisecond
}

// Payment is Toss's Payment object, as the fake keeps and answers it.
type Payment struct {
	Version        string          `json:"version"`
	PaymentKey     string          `json:"paymentKey"`
	OrderID        string          `json:"orderId"`
	Status         string          `json:"status"`
	Method         string          `json:"method"`
	TotalAmount    Won             `json:"totalAmount"`
	BalanceAmount  Won             `json:"balanceAmount"`
	Currency       string          `json:"currency"`
	ApprovedAt     *string         `json:"approvedAt"`
	VirtualAccount *VirtualAccount `json:"virtualAccount"`
	Cancels        []Cancel        `json:"cancels"`
	Failure        *Error          `json:"failure"`
}

// VirtualAccount is a Payment's virtual account.
type VirtualAccount struct {
	AccountNumber string `json:"accountNumber"`
	DueDate       string `json:"dueDate"`
	Expired       bool   `json:"expired"`
}

// Cancel is one cancel (refund) of a Payment.
type Cancel struct {
	TransactionKey string `json:"transactionKey,omitempty"`
	CancelReason   string `json:"cancelReason"`
	CancelAmount   Won    `json:"cancelAmount"`
	CanceledAt     string `json:"canceledAt"`
	CancelStatus   string `json:"cancelStatus,omitempty"`
}

// Won is written as Toss writes amounts since version 1.4: a JSON
// number with a fraction part.
type Won int64

// MarshalJSON implements json.Marshaler.
func (a Won) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%d.0", a)), nil }

// Now is the time now as Toss writes it.
func Now() *string {
	t := time.Now().Format(time.RFC3339)
	return &t
}

// Error is Toss's error body, and a payment's failure.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type recorded struct {
	status int
	body   []byte
}

// New returns a Server that accepts the secret key secret.
func New(secret string) *Server {
	return &Server{secret: secret, byKey: map[string]*Payment{}, byOrder: map[string]string{}, idem: map[string]recorded{}, now: time.Now}
}

// SetClock makes the server read the time from now instead of time.Now:
// when transactions, approvals and cancels happen.
func (f *Server) SetClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = now
}

// kst is Korea Standard Time, in which Toss reads and writes date-times.
var kst = time.FixedZone("KST", 9*60*60)

// stamp is the time now as Toss writes it.
func (f *Server) stamp() string { return f.now().In(kst).Format(time.RFC3339) }

// transact records a transaction of p made now. The caller holds mu.
func (f *Server) transact(p *Payment, key, status string, amount Won) {
	if key == "" {
		f.seq++
		key = fmt.Sprintf("txk_%d", f.seq)
	}
	at := f.now().Truncate(time.Millisecond)
	f.txs = append(f.txs, Transaction{MID: "tvivarepublica", TransactionKey: key, PaymentKey: p.PaymentKey, OrderID: p.OrderID,
		Method: p.Method, ReceiptURL: "https://dashboard.tosspayments.com/receipt/redirection?transactionId=" + p.PaymentKey + "&ref=PX",
		Status: status, TransactionAt: at.In(kst).Format("2006-01-02T15:04:05.999Z07:00"), Currency: p.Currency, Amount: amount, at: at})
}

var fakeOrderID = regexp.MustCompile(`^[A-Za-z0-9_-]{6,64}$`)

// ServeHTTP implements http.Handler.
func (f *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(f.secret+":"))
	if r.Header.Get("Authorization") != want {
		Write(w, http.StatusUnauthorized, Error{"UNAUTHORIZED_KEY", "인증되지 않은 시크릿 키 혹은 클라이언트 키 입니다."})
		return
	}
	if v := r.Header.Get("TossPayments-API-Version"); v != "2022-11-16" {
		// The fake speaks one version only; answering another's shapes
		// would prove nothing.
		Write(w, http.StatusBadRequest, Error{"INVALID_REQUEST", "unsupported API version " + v})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if r.Method == http.MethodPost && key != "" {
		if rec, ok := f.idem[key]; ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body)
			return
		}
		rec := httptest.NewRecorder()
		f.route(rec, r)
		if rec.Code < 500 {
			f.idem[key] = recorded{rec.Code, rec.Body.Bytes()}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return
	}
	f.route(w, r)
}

func (f *Server) route(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case r.Method == http.MethodPost && path == "/v1/payments/confirm":
		f.confirm(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/v1/payments/orders/"):
		f.get(w, f.byOrder[strings.TrimPrefix(path, "/v1/payments/orders/")])
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1/payments/") && strings.HasSuffix(path, "/cancel"):
		f.cancel(w, r, strings.TrimSuffix(strings.TrimPrefix(path, "/v1/payments/"), "/cancel"))
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/v1/payments/"):
		f.get(w, strings.TrimPrefix(path, "/v1/payments/"))
	case r.Method == http.MethodGet && path == "/v1/transactions":
		f.transactions(w, r)
	default:
		Write(w, http.StatusNotFound, Error{"NOT_FOUND", "존재하지 않는 API 입니다."})
	}
}

func (f *Server) confirm(w http.ResponseWriter, r *http.Request) {
	var req struct {
		PaymentKey string `json:"paymentKey"`
		OrderID    string `json:"orderId"`
		Amount     int64  `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.PaymentKey == "" || !fakeOrderID.MatchString(req.OrderID) || req.Amount <= 0 {
		Write(w, http.StatusBadRequest, Error{"INVALID_REQUEST", "잘못된 요청입니다."})
		return
	}
	if !strings.HasPrefix(req.PaymentKey, "tgen_") {
		Write(w, http.StatusNotFound, Error{"NOT_FOUND_PAYMENT", "존재하지 않는 결제 정보 입니다."})
		return
	}
	if strings.Contains(req.PaymentKey, "_belowmin_") {
		Write(w, http.StatusBadRequest, Error{"BELOW_MINIMUM_AMOUNT", "신용카드는 결제금액이 100원 이상, 계좌는 200원이상부터 결제가 가능합니다."})
		return
	}
	if p, ok := f.byKey[req.PaymentKey]; ok && p.Status != "READY" && p.Status != "IN_PROGRESS" {
		Write(w, http.StatusBadRequest, Error{"ALREADY_PROCESSED_PAYMENT", "이미 처리된 결제 입니다."})
		return
	}
	if key, ok := f.byOrder[req.OrderID]; ok && key != req.PaymentKey {
		Write(w, http.StatusBadRequest, Error{"DUPLICATED_ORDER_ID", "이미 승인 및 취소가 진행된 중복된 주문번호 입니다."})
		return
	}
	p := &Payment{Version: "2022-11-16", PaymentKey: req.PaymentKey, OrderID: req.OrderID, Method: "카드",
		TotalAmount: Won(req.Amount), BalanceAmount: Won(req.Amount), Currency: "KRW", Cancels: []Cancel{}}
	f.byKey[p.PaymentKey], f.byOrder[p.OrderID] = p, p.PaymentKey
	refuse := func(status int, e Error) {
		p.Status, p.Failure = "ABORTED", &e
		Write(w, status, e)
	}
	switch {
	case strings.Contains(req.PaymentKey, "_declined_"):
		refuse(http.StatusForbidden, Error{"REJECT_CARD_COMPANY", "결제 승인이 거절되었습니다."})
	case strings.Contains(req.PaymentKey, "_nofunds_"):
		refuse(http.StatusForbidden, Error{"REJECT_CARD_PAYMENT", "한도초과 혹은 잔액부족으로 결제에 실패했습니다."})
	case strings.Contains(req.PaymentKey, "_points_"):
		refuse(http.StatusBadRequest, Error{"NOT_ALLOWED_POINT_USE", "포인트 사용이 불가한 카드로 카드 포인트 결제에 실패했습니다."})
	case strings.Contains(req.PaymentKey, "_newcode_"):
		refuse(http.StatusForbidden, Error{"SOME_NEW_REFUSAL", "새로운 거절 사유"})
	case strings.Contains(req.PaymentKey, "_vbank_"):
		p.Method, p.Status = "가상계좌", "WAITING_FOR_DEPOSIT"
		p.VirtualAccount = &VirtualAccount{AccountNumber: "X1234567890", DueDate: f.now().Add(7 * 24 * time.Hour).Format(time.RFC3339)}
		f.transact(p, "", p.Status, 0)
		Write(w, http.StatusOK, p)
	default:
		approved := f.stamp()
		p.Status, p.ApprovedAt = "DONE", &approved
		f.transact(p, "", p.Status, p.TotalAmount)
		Write(w, http.StatusOK, p)
	}
}

func (f *Server) get(w http.ResponseWriter, paymentKey string) {
	p, ok := f.byKey[paymentKey]
	if !ok {
		Write(w, http.StatusNotFound, Error{"NOT_FOUND_PAYMENT", "존재하지 않는 결제 정보 입니다."})
		return
	}
	Write(w, http.StatusOK, p)
}

func (f *Server) cancel(w http.ResponseWriter, r *http.Request, paymentKey string) {
	var req struct {
		CancelReason string `json:"cancelReason"`
		CancelAmount *int64 `json:"cancelAmount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.CancelReason == "" || len([]rune(req.CancelReason)) > 200 {
		Write(w, http.StatusBadRequest, Error{"INVALID_REQUEST", "잘못된 요청입니다."})
		return
	}
	p, ok := f.byKey[paymentKey]
	if !ok {
		Write(w, http.StatusNotFound, Error{"NOT_FOUND_PAYMENT", "존재하지 않는 결제 정보 입니다."})
		return
	}
	switch p.Status {
	case "CANCELED":
		Write(w, http.StatusBadRequest, Error{"ALREADY_CANCELED_PAYMENT", "이미 취소된 결제 입니다."})
		return
	case "DONE", "PARTIAL_CANCELED":
	default:
		Write(w, http.StatusForbidden, Error{"NOT_CANCELABLE_PAYMENT", "취소 할 수 없는 결제 입니다."})
		return
	}
	amount := int64(p.BalanceAmount)
	if req.CancelAmount != nil {
		amount = *req.CancelAmount
	}
	if amount <= 0 || amount > int64(p.BalanceAmount) {
		Write(w, http.StatusForbidden, Error{"NOT_CANCELABLE_AMOUNT", "취소 할 수 없는 금액 입니다."})
		return
	}
	f.seq++
	c := Cancel{TransactionKey: fmt.Sprintf("txk_%d", f.seq), CancelReason: req.CancelReason,
		CancelAmount: Won(amount), CanceledAt: f.stamp(), CancelStatus: "DONE"}
	p.Cancels = append(p.Cancels, c)
	p.BalanceAmount -= Won(amount)
	p.Status = "PARTIAL_CANCELED"
	if p.BalanceAmount == 0 {
		p.Status = "CANCELED"
	}
	f.transact(p, c.TransactionKey, p.Status, c.CancelAmount)
	Write(w, http.StatusOK, p)
}

// transactions answers one page of the listing, as the Server comment says.
func (f *Server) transactions(w http.ResponseWriter, r *http.Request) {
	invalid := func(why string) {
		Write(w, http.StatusBadRequest, Error{"INVALID_REQUEST", "잘못된 요청입니다: " + why})
	}
	q := r.URL.Query()
	start, ok1 := koreanTime(q.Get("startDate"))
	end, ok2 := koreanTime(q.Get("endDate"))
	if !ok1 || !ok2 || end.Before(start) {
		invalid("startDate and endDate must be date-times, endDate not before startDate")
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 5000 {
			invalid("limit must be 1 to 5000")
			return
		}
		limit = n
	}
	txs := append([]Transaction(nil), f.txs...)
	sort.SliceStable(txs, func(i, j int) bool { return txs[i].at.Before(txs[j].at) })
	from := 0
	if after := q.Get("startingAfter"); after != "" {
		from = -1
		for i, t := range txs {
			if t.TransactionKey == after {
				from = i + 1
			}
		}
		if from < 0 {
			invalid("no transaction " + after)
			return
		}
	}
	page := []Transaction{}
	for _, t := range txs[from:] {
		if len(page) == limit {
			break
		}
		if !t.at.Before(start) && !t.at.After(end) {
			page = append(page, t)
		}
	}
	Write(w, http.StatusOK, page)
}

// koreanTime reads a date-time (to the millisecond) or a date in KST, as
// Toss reads startDate and endDate.
func koreanTime(s string) (time.Time, bool) {
	for _, layout := range []string{"2006-01-02T15:04:05.000", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, kst); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// Charges counts confirmed payments (approved or refused) for an order id.
func (f *Server) Charges(orderID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.byKey {
		if p.OrderID == orderID && p.Status != "READY" && p.Status != "IN_PROGRESS" {
			n++
		}
	}
	return n
}

// Refunds counts cancels made for a refund order id.
func (f *Server) Refunds(refundOrderID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.byKey {
		for _, c := range p.Cancels {
			if strings.HasSuffix(c.CancelReason, "[ref:"+refundOrderID+"]") {
				n++
			}
		}
	}
	return n
}

// ForgetIdempotencyKeys models Toss's 15-day key expiry.
func (f *Server) ForgetIdempotencyKeys() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.idem = map[string]recorded{}
}

// Deposit settles a virtual account as the bank would: the deposit arrived
// (DONE), or its deadline passed.
func (f *Server) Deposit(orderID string, arrived bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.byKey[f.byOrder[orderID]]
	if p == nil || p.Status != "WAITING_FOR_DEPOSIT" {
		panic("no virtual account waits for " + orderID)
	}
	if arrived {
		approved := f.stamp()
		p.Status, p.ApprovedAt = "DONE", &approved
		f.transact(p, "", p.Status, p.TotalAmount)
		return
	}
	p.VirtualAccount.Expired = true
}

// Seed puts a payment in a given state, as the widget and time would.
func (f *Server) Seed(p Payment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byKey[p.PaymentKey], f.byOrder[p.OrderID] = &p, p.PaymentKey
}

// RequestCount is how many requests the server received.
func (f *Server) RequestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// Write answers v as JSON with status.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Notification is the body of the PAYMENT_STATUS_CHANGED notification Toss
// sends for the payment of orderID, with the payment as it stands now.
func (f *Server) Notification(orderID string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.byKey[f.byOrder[orderID]]
	if p == nil {
		panic("no payment for " + orderID)
	}
	b, err := json.Marshal(map[string]any{"eventType": "PAYMENT_STATUS_CHANGED", "createdAt": time.Now().Format("2006-01-02T15:04:05.000000"), "data": p})
	if err != nil {
		panic(err)
	}
	return b
}

// DepositCallback is the body of the DEPOSIT_CALLBACK notification Toss
// sends when a virtual account's deposit arrives.
func DepositCallback(orderID, status string) []byte {
	b, err := json.Marshal(map[string]any{"createdAt": time.Now().Format("2006-01-02T15:04:05.000"), "secret": "ps_fake",
		"status": status, "transactionKey": "txk_deposit", "orderId": orderID})
	if err != nil {
		panic(err)
	}
	return b
}
