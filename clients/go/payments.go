package gateway

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// PaymentService is /payments: creating, confirming, capturing and
// canceling payments, and reading them.
type PaymentService struct{ c *Client }

// Create creates a payment and, unless req.Confirm is false, charges it,
// once whatever the retries. The payment's Status is the answer:
//
//   - succeeded; requires_capture for CaptureManual (capture or cancel it
//     before CaptureBefore);
//   - declined (DeclineCode says why) or failed: a final answer, replayed
//     for this key; a new attempt needs a new key;
//   - requires_confirmation (Confirm false): hand ID and ClientSecret to the
//     checkout page, or Confirm it here;
//   - requires_review, processing: not settled yet; follow it with Get or
//     the events.
//
// Errors are *Error: CodeInvalidRequest (Fields; the key stays free),
// CodePSPCannotAccept, CodeIdempotencyKeyMismatch (the key was used with
// another request: a client bug), CodeIdempotencyKeyReused (the key's
// answer expired: PaymentID names its payment; look it up, never re-run
// it), CodeCanceledByKey (nothing was or will be charged). One that
// IsRetryable means the retries ran out before an answer: call again with
// the same key (Error.IdempotencyKey), or GetByKey.
func (s *PaymentService) Create(ctx context.Context, req *CreatePaymentRequest, opts ...CallOption) (*Payment, error) {
	if req == nil {
		return nil, errors.New("gateway: Payments.Create: nil request")
	}
	return postFor[Payment](ctx, s.c, "/payments", req, opts)
}

// Get reads a payment as it stands. Errors: CodeNotFound (none of this
// merchant's).
func (s *PaymentService) Get(ctx context.Context, id string, opts ...CallOption) (*Payment, error) {
	p, err := idPath("/payments/", id)
	if err != nil {
		return nil, err
	}
	return getFor[Payment](ctx, s.c, p, nil, opts)
}

// GetByKey reads the payment that the POST /payments with this
// Idempotency-Key created: how a caller that lost an answer looks instead
// of posting again. Errors: CodeNotFound (the key created none).
func (s *PaymentService) GetByKey(ctx context.Context, key string, opts ...CallOption) (*Payment, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	return getFor[Payment](ctx, s.c, "/payments", url.Values{"idempotency_key": {key}}, opts)
}

// List walks the merchant's payments, newest first, page by page (see
// PaymentListParams). An error ends the walk: it is yielded once, with a
// zero Payment.
func (s *PaymentService) List(ctx context.Context, params *PaymentListParams, opts ...CallOption) iter.Seq2[Payment, error] {
	var q url.Values
	backward := false
	if params != nil {
		q, backward = params.values()
	}
	return paginate(ctx, s.c, "/payments", q, backward, func(p Payment) string { return p.ID }, opts)
}

// Confirm charges a two-step payment with the PSP client's result, once
// whatever the retries (with its own key: never the creation's). The
// payment's Status is the answer, as for Create; requires_action says the
// customer must act (NextAction). Errors: CodePaymentNotConfirmable
// (already confirmed, by another key too, or expired: look it up, never
// confirm it again), CodeConfirmMismatch, CodeIdempotencyKeyMismatch,
// CodeNotFound, and the transient ones, as for Create.
func (s *PaymentService) Confirm(ctx context.Context, id string, req *ConfirmPaymentRequest, opts ...CallOption) (*Payment, error) {
	p, err := idPath("/payments/", id)
	if err != nil {
		return nil, err
	}
	if req == nil {
		req = &ConfirmPaymentRequest{}
	}
	return postFor[Payment](ctx, s.c, p+"/confirm", req, opts)
}

// Capture takes all of an authorization (CaptureManual), or
// req.AmountToCapture of it (the rest is released). The payment's Status
// is the answer: succeeded (AmountCaptured); requires_capture (the PSP
// refused: final for this key) or canceled (the authorization had lapsed);
// requires_review. Errors: CodePaymentNotCapturable,
// CodeAuthorizationExpired, CodeCaptureExceedsAuthorized (Fields), and the
// transient ones.
func (s *PaymentService) Capture(ctx context.Context, id string, req *CapturePaymentRequest, opts ...CallOption) (*Payment, error) {
	p, err := idPath("/payments/", id)
	if err != nil {
		return nil, err
	}
	if req == nil {
		req = &CapturePaymentRequest{}
	}
	return postFor[Payment](ctx, s.c, p+"/capture", req, opts)
}

// Cancel releases an authorization, or cancels a payment awaiting its
// confirmation or its customer. The payment's Status is the answer:
// canceled; succeeded (the customer paid first: refund it), or another
// status the PSP left it in (refused: final for this key);
// requires_review. Errors: CodePaymentNotCancelable (it took money or has
// ended, or is being charged: CancelByKey), and the transient ones.
func (s *PaymentService) Cancel(ctx context.Context, id string, req *CancelPaymentRequest, opts ...CallOption) (*Payment, error) {
	p, err := idPath("/payments/", id)
	if err != nil {
		return nil, err
	}
	if req == nil {
		req = &CancelPaymentRequest{}
	}
	return postFor[Payment](ctx, s.c, p+"/cancel", req, opts)
}

// CancelByKey cancels whatever the POST /payments with req.IdempotencyKey
// did or will do, without knowing whether it made a payment: nothing
// charged yet stays so; a charge is voided or refunded. The call has a key
// of its own (one per cancellation). Cancellation.Status is the answer:
// canceled, voided, refunded (RefundID), requires_review, or
// cancel_requested (carried out once the PSP's truth is known: call again
// with the same key to read the final answer). Errors: CodeConflict (the
// key was canceled by another cancellation), CodeInvalidRequest,
// CodeIdempotencyKeyMismatch, and the transient ones.
func (s *PaymentService) CancelByKey(ctx context.Context, req *CancelByKeyRequest, opts ...CallOption) (*Cancellation, error) {
	if req == nil {
		return nil, errors.New("gateway: Payments.CancelByKey: nil request")
	}
	return postFor[Cancellation](ctx, s.c, "/payments/cancel_by_key", req, opts)
}

// PaymentListParams narrow and page GET /payments; nil lists every
// payment, newest first.
type PaymentListParams struct {
	// Limit is the page size, 1 to 100 (10 when 0): how many one request
	// reads, not how many the walk yields (break out of the loop for that).
	Limit int
	// StartingAfter starts the walk after this payment, toward older ones;
	// EndingBefore before it, toward newer ones (yielded oldest first, so
	// that the walk moves away from its cursor). At most one of them.
	StartingAfter string
	EndingBefore  string
	Status        PaymentStatus
	// CreatedGTE (inclusive) and CreatedLT (exclusive) bound created_at.
	CreatedGTE time.Time
	CreatedLT  time.Time
}

func (p *PaymentListParams) values() (url.Values, bool) {
	q := listValues(p.Limit, p.StartingAfter, p.EndingBefore, p.CreatedGTE, p.CreatedLT)
	if p.Status != "" {
		q.Set("status", string(p.Status))
	}
	return q, p.EndingBefore != ""
}

// postFor posts a keyed, deduplicated operation and decodes its answer.
func postFor[T any](ctx context.Context, c *Client, path string, body any, opts []CallOption) (*T, error) {
	cl, err := c.post(path, body, true, opts)
	if err != nil {
		return nil, err
	}
	var out T
	if err := c.do(ctx, cl, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// getFor reads one object.
func getFor[T any](ctx context.Context, c *Client, path string, q url.Values, opts []CallOption) (*T, error) {
	var out T
	if err := c.do(ctx, get(path, q, opts), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// idPath is prefix followed by id, escaped; an empty id names nothing.
func idPath(prefix, id string) (string, error) {
	if id == "" {
		return "", errors.New("gateway: an empty id names nothing")
	}
	return prefix + url.PathEscape(id), nil
}

// listValues are the parameters every listing of payments and refunds takes.
func listValues(limit int, after, before string, gte, lt time.Time) url.Values {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("starting_after", after)
	}
	if before != "" {
		q.Set("ending_before", before)
	}
	if !gte.IsZero() {
		q.Set("created[gte]", gte.UTC().Format(time.RFC3339Nano))
	}
	if !lt.IsZero() {
		q.Set("created[lt]", lt.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// deleteFor deletes an object; a deletion may be sent again, so it is
// retried as a read is.
func deleteFor[T any](ctx context.Context, c *Client, path string, opts []CallOption) (*T, error) {
	cl := get(path, nil, opts)
	cl.method = http.MethodDelete
	var out T
	if err := c.do(ctx, cl, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
