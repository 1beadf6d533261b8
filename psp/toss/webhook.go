package toss

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"gateway/psp"
)

// Webhooks: Toss does not sign its payment notifications
// (PAYMENT_STATUS_CHANGED carries the payment, DEPOSIT_CALLBACK a virtual
// account's orderId and status, CANCEL_STATUS_CHANGED a cancel), so
// ReadNotice believes none of what a request says. It takes from it the
// paymentKey or orderId alone and fetches that payment from Toss
// (GET /v1/payments/{paymentKey}, or /v1/payments/orders/{orderId}): a forged
// or stale notification costs a lookup and changes nothing the payment's
// own state does not say.

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
	var path string
	switch {
	case key != "" && len(key) <= maxPaymentKeyLen:
		path = "/v1/payments/" + url.PathEscape(key)
	case orderIDPattern.MatchString(order):
		path = "/v1/payments/orders/" + url.PathEscape(order)
	default:
		return psp.Notice{}, fmt.Errorf("%w: the notification names no payment (paymentKey or orderId)", psp.ErrUnverified)
	}
	n.ID = key + "/" + order
	p, err := a.payment(ctx, op, path)
	switch {
	case errors.Is(err, psp.ErrNotFound):
		n.Skipped = append(n.Skipped, "Toss has no payment "+n.ID)
		return n, nil
	case err != nil:
		return psp.Notice{}, err
	case key != "" && p.PaymentKey != key, key == "" && p.OrderID != order:
		return psp.Notice{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked Toss for payment %s, it answered with %s/%s", psp.ErrMismatch, n.ID, p.PaymentKey, p.OrderID)}
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
