package toss

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"gateway/psp"
)

// Webhooks: Toss does not sign its payment notifications
// (PAYMENT_STATUS_CHANGED carries the payment, DEPOSIT_CALLBACK a virtual
// account's orderId and status, CANCEL_STATUS_CHANGED a cancel), so
// ReadNotice believes none of what a request says. It takes from it the
// orderId and the paymentKey alone and fetches that payment from Toss
// (GET /v1/payments/{paymentKey}, or /v1/payments/orders/{orderId}): a forged
// or stale notification changes nothing the payment's own state does not say.
//
// Since anyone can post one, and each fetch spends the quota real charges
// share, Toss is asked only what it must be: the names must be in Toss's
// alphabet (an orderId of 6–64, a paymentKey of at most 200 characters of
// [A-Za-z0-9_-]), the order must be one the gateway holds (Config.KnownOrder),
// and identical fetches in flight at once are sent once.

var _ psp.NoticeReader = (*Adapter)(nil)

// notification is the part of Toss's webhook bodies ReadNotice reads: the
// names of the payment, never its state.
type notification struct {
	EventType string `json:"eventType"`
	OrderID   string `json:"orderId"`
	Data      *struct {
		PaymentKey string `json:"paymentKey"`
		OrderID    string `json:"orderId"`
	} `json:"data"`
}

// ReadNotice implements psp.NoticeReader for Toss's webhook requests.
func (a *Adapter) ReadNotice(ctx context.Context, _ http.Header, body []byte) (psp.Notice, error) {
	const op = "notice"
	var b notification
	if err := json.Unmarshal(body, &b); err != nil {
		return psp.Notice{}, fmt.Errorf("%w: not a Toss notification: %v", psp.ErrUnverified, err)
	}
	n := psp.Notice{Type: b.EventType}
	key, order := "", b.OrderID
	if b.Data != nil {
		key = b.Data.PaymentKey
		if b.Data.OrderID != "" {
			order = b.Data.OrderID
		}
	}
	if n.Type == "" && order != "" {
		n.Type = "DEPOSIT_CALLBACK" // the one notification without an eventType
	}
	switch {
	case !orderIDPattern.MatchString(order):
		return psp.Notice{}, fmt.Errorf("%w: the notification names no payment (an orderId of 6–64 characters of [A-Za-z0-9_-])", psp.ErrUnverified)
	case key != "" && !paymentKeyPattern.MatchString(key):
		return psp.Notice{}, fmt.Errorf("%w: the notification's paymentKey is not one of Toss's (1–%d characters of [A-Za-z0-9_-])", psp.ErrUnverified, maxPaymentKeyLen)
	}
	n.ID = key + "/" + order
	if a.knownOrder != nil {
		known, err := a.knownOrder(ctx, order)
		if err != nil {
			return psp.Notice{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("whether the gateway holds order %s: %w", order, err)}
		}
		if !known {
			n.Skipped = append(n.Skipped, "the gateway holds no order "+order+": Toss was not asked")
			return n, nil
		}
	}
	path := "/v1/payments/orders/" + url.PathEscape(order)
	if key != "" {
		path = "/v1/payments/" + url.PathEscape(key)
	}
	p, err := a.lookups.do(path, func() (payment, error) { return a.payment(ctx, op, path) })
	switch {
	case errors.Is(err, psp.ErrNotFound):
		n.Skipped = append(n.Skipped, "Toss has no payment "+n.ID)
		return n, nil
	case err != nil:
		return psp.Notice{}, err
	case key != "" && p.PaymentKey != key:
		return psp.Notice{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked Toss for payment %s, it answered with %s/%s", psp.ErrMismatch, n.ID, p.PaymentKey, p.OrderID)}
	case p.OrderID != order:
		// Toss's payment is another order's: the body paired names that
		// Toss never sent together.
		return psp.Notice{}, fmt.Errorf("%w: payment %s is order %s at Toss, not %s", psp.ErrUnverified, key, p.OrderID, order)
	}
	c, err := toCharge(op, p, p.OrderID)
	switch {
	case errors.Is(err, psp.ErrNotFound):
		n.Skipped = append(n.Skipped, "payment "+p.PaymentKey+" is "+p.Status+": not confirmed")
	case err != nil:
		n.Skipped = append(n.Skipped, err.Error())
	default:
		n.Charges = append(n.Charges, c)
	}
	for _, cn := range p.Cancels {
		id, ok := taggedRefund(cn.CancelReason)
		if !ok {
			continue
		}
		r, err := toRefund(op, p, id)
		if err != nil {
			n.Skipped = append(n.Skipped, err.Error())
			continue
		}
		n.Refunds = append(n.Refunds, r)
	}
	return n, nil
}

// paymentKeyPattern is what a Toss paymentKey can be: Toss documents at
// most 200 characters, and issues letters, digits, '-' and '_'.
var paymentKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// lookups coalesces identical fetches in flight: the notifications about
// one payment that arrive together (Toss's repeats, a forger's copies) cost
// Toss one call, whose answer each of them reads.
type lookups struct {
	mu       sync.Mutex
	inFlight map[string]*lookup
}

type lookup struct {
	done    chan struct{}
	p       payment
	err     error
	waiting int // callers besides the one asking, for tests
}

// do returns fetch's answer for path, sharing the fetch in flight for the
// same path if there is one: its caller's context bounds it.
func (l *lookups) do(path string, fetch func() (payment, error)) (payment, error) {
	l.mu.Lock()
	if f, ok := l.inFlight[path]; ok {
		f.waiting++
		l.mu.Unlock()
		<-f.done
		return f.p, f.err
	}
	f := &lookup{done: make(chan struct{})}
	if l.inFlight == nil {
		l.inFlight = map[string]*lookup{}
	}
	l.inFlight[path] = f
	l.mu.Unlock()
	f.p, f.err = fetch()
	l.mu.Lock()
	delete(l.inFlight, path)
	l.mu.Unlock()
	close(f.done)
	return f.p, f.err
}

// taggedRefund reads the refund order id the adapter wrote at the end of a
// cancel's reason (refTag).
func taggedRefund(reason string) (string, bool) {
	i := strings.LastIndex(reason, "[ref:")
	if i < 0 || !strings.HasSuffix(reason, "]") {
		return "", false
	}
	id := reason[i+len("[ref:") : len(reason)-1]
	return id, orderIDPattern.MatchString(id)
}
