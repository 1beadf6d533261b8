package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"gateway/psp"
)

// Webhooks: Stripe signs every webhook request (Stripe-Signature: t=…,v1=…,
// an HMAC-SHA256 of the timestamp and the body keyed by the endpoint's
// signing secret). ReadNotice verifies it with stripe-go's webhook package
// and refuses a signed timestamp more than five minutes from its clock,
// either way: an old one is a replayed request, and one from the future
// would stay replayable for as long as it lies ahead (stripe-go looks only
// back). It then reads what the event is about from Stripe itself, not from the
// event: the PaymentIntent it names (retrieved by id, which is consistent,
// unlike search), and for refund events every refund of that PaymentIntent.
// An event is a snapshot taken when it happened and may arrive late or out
// of order; the object as it stands now cannot be stale.

var _ psp.NoticeReader = (*Adapter)(nil)

// ReadNotice implements psp.NoticeReader for Stripe's webhook events.
func (a *Adapter) ReadNotice(ctx context.Context, header http.Header, body []byte) (psp.Notice, error) {
	const op = "notice"
	if a.whSecret == "" {
		return psp.Notice{}, fmt.Errorf("%w: no Stripe webhook signing secret is configured", psp.ErrUnverified)
	}
	// The event's API version matters not: only ids are read from it. The
	// timestamp is judged here, once the signature vouches for it.
	sig := header.Get("Stripe-Signature")
	ev, err := webhook.ConstructEventWithOptions(body, sig, a.whSecret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true, IgnoreTolerance: true})
	if err != nil {
		return psp.Notice{}, fmt.Errorf("%w: %w", psp.ErrUnverified, err)
	}
	if err := a.checkTimestamp(sig); err != nil {
		return psp.Notice{}, fmt.Errorf("%w: %w", psp.ErrUnverified, err)
	}
	n := psp.Notice{ID: ev.ID, Type: string(ev.Type)}
	if ev.Data == nil || ev.Data.Object == nil {
		n.Skipped = append(n.Skipped, "the event carries no object")
		return n, nil
	}
	obj := ev.Data.Object
	kind, _ := obj["object"].(string)
	var pi string
	switch kind {
	case "payment_intent":
		pi, _ = obj["id"].(string)
	case "charge", "refund":
		pi = idOf(obj["payment_intent"])
	default:
		n.Skipped = append(n.Skipped, fmt.Sprintf("a %q event is not about a payment", ev.Type))
		return n, nil
	}
	if pi == "" {
		n.Skipped = append(n.Skipped, fmt.Sprintf("the %s names no payment intent", kind))
		return n, nil
	}
	if kind != "refund" {
		c, why, err := a.currentCharge(ctx, op, pi)
		if err != nil {
			return psp.Notice{}, err
		}
		if why != "" {
			n.Skipped = append(n.Skipped, why)
		} else {
			n.Charges = append(n.Charges, c)
		}
	}
	if kind == "refund" || strings.HasPrefix(string(ev.Type), "charge.refund") {
		err := a.listRefunds(ctx, op, pi, func(rf *sdk.Refund) bool {
			if rf.Metadata[metaRefundID] == "" {
				n.Skipped = append(n.Skipped, "refund "+rf.ID+" was not made by the gateway")
				return true
			}
			r, err := a.toRefund(op, rf)
			if err != nil {
				n.Skipped = append(n.Skipped, err.Error())
				return true
			}
			n.Refunds = append(n.Refunds, r)
			return true
		})
		switch {
		case errors.Is(err, psp.ErrNotFound):
			n.Skipped = append(n.Skipped, "payment intent "+pi+" is unknown to Stripe")
		case err != nil:
			return psp.Notice{}, err
		}
	}
	return n, nil
}

// checkTimestamp refuses a signature header whose timestamp (the last t=,
// the one stripe-go verified the signature with) is more than
// webhook.DefaultTolerance from the adapter's clock, before or after.
func (a *Adapter) checkTimestamp(sig string) error {
	var t int64
	found := false
	for _, pair := range strings.Split(sig, ",") {
		if v, ok := strings.CutPrefix(pair, "t="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return webhook.ErrInvalidHeader
			}
			t, found = n, true
		}
	}
	if !found {
		return webhook.ErrInvalidHeader
	}
	now := a.now().Unix()
	// Compared in seconds, as signed: no overflow however far t lies.
	if tol := int64(webhook.DefaultTolerance / time.Second); t < now-tol || t > now+tol {
		return fmt.Errorf("the signed timestamp %d is more than %s from now", t, webhook.DefaultTolerance)
	}
	return nil
}

// currentCharge retrieves the PaymentIntent pi as it stands now. why says,
// instead of a charge, what makes it none of the gateway's business (no
// such intent, one the gateway did not create, a state it cannot read); err
// is a failure to ask.
func (a *Adapter) currentCharge(ctx context.Context, op, pi string) (c psp.Charge, why string, err error) {
	got, err := a.retrieve(ctx, pi) // with its latest charge: an authorization's capture_before
	if err != nil {
		var se *sdk.Error
		if errors.As(err, &se) && se.Code == sdk.ErrorCodeResourceMissing {
			return psp.Charge{}, "payment intent " + pi + " is unknown to Stripe", nil
		}
		return psp.Charge{}, "", lookupFailure(op, err)
	}
	if got.ID != pi {
		return psp.Charge{}, "", &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked for payment intent %s, Stripe answered %s", psp.ErrMismatch, pi, got.ID)}
	}
	if got.Metadata[metaOrderID] == "" {
		return psp.Charge{}, "payment intent " + pi + " was not made by the gateway", nil
	}
	c, err = a.settled(ctx, op, got)
	if err != nil {
		return psp.Charge{}, "payment intent " + pi + ": " + err.Error(), nil
	}
	return c, "", nil
}

// idOf reads an id field of an event object: a bare id, or an expanded
// object's id.
func idOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		id, _ := x["id"].(string)
		return id
	}
	return ""
}

// maskWebhookSecret keeps a signing secret's whsec_ prefix for logs.
func maskWebhookSecret(secret string) string {
	switch {
	case secret == "":
		return ""
	case strings.HasPrefix(secret, "whsec_"):
		return "whsec_****"
	}
	return "****"
}
