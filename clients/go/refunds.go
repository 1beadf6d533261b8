package gateway

import (
	"context"
	"iter"
	"net/url"
	"time"
)

// RefundService is refunds: POST /payments/{id}/refunds, GET /refunds,
// GET /refunds/{id} and GET /payments/{id}/refunds.
type RefundService struct{ c *Client }

// Create refunds req.Amount of a succeeded payment, or all that is left of
// it when req is nil or its Amount zero, once whatever the retries. The
// refund's Status is the answer: succeeded; pending or requires_review
// (follow it with Get); failed (the PSP refused: DeclineCode; final for
// this key). Errors: CodePaymentNotRefundable (not succeeded, or nothing
// left), CodeRefundExceedsRefundable (Fields says how much is left),
// CodeIdempotencyKeyMismatch, CodeIdempotencyKeyReused (RefundID),
// CodeNotFound, and the transient ones, as for Payments.Create.
func (s *RefundService) Create(ctx context.Context, paymentID string, req *CreateRefundRequest, opts ...CallOption) (*Refund, error) {
	p, err := idPath("/payments/", paymentID)
	if err != nil {
		return nil, err
	}
	if req == nil {
		req = &CreateRefundRequest{}
	}
	return postFor[Refund](ctx, s.c, p+"/refunds", req, opts)
}

// Get reads a refund. Errors: CodeNotFound.
func (s *RefundService) Get(ctx context.Context, id string, opts ...CallOption) (*Refund, error) {
	p, err := idPath("/refunds/", id)
	if err != nil {
		return nil, err
	}
	return getFor[Refund](ctx, s.c, p, nil, opts)
}

// List walks the merchant's refunds, newest first (see RefundListParams).
// An error ends the walk: it is yielded once, with a zero Refund.
func (s *RefundService) List(ctx context.Context, params *RefundListParams, opts ...CallOption) iter.Seq2[Refund, error] {
	return s.list(ctx, "/refunds", params, opts)
}

// ListForPayment walks one payment's refunds, newest first. An unknown
// payment ends the walk with CodeNotFound.
func (s *RefundService) ListForPayment(ctx context.Context, paymentID string, params *RefundListParams, opts ...CallOption) iter.Seq2[Refund, error] {
	p, err := idPath("/payments/", paymentID)
	if err != nil {
		return func(yield func(Refund, error) bool) { yield(Refund{}, err) }
	}
	return s.list(ctx, p+"/refunds", params, opts)
}

func (s *RefundService) list(ctx context.Context, path string, params *RefundListParams, opts []CallOption) iter.Seq2[Refund, error] {
	var q url.Values
	backward := false
	if params != nil {
		q = listValues(params.Limit, params.StartingAfter, params.EndingBefore, params.CreatedGTE, params.CreatedLT)
		if params.Status != "" {
			q.Set("status", string(params.Status))
		}
		backward = params.EndingBefore != ""
	}
	return paginate(ctx, s.c, path, q, backward, func(r Refund) string { return r.ID }, opts)
}

// RefundListParams narrow and page a listing of refunds, as
// PaymentListParams do payments.
type RefundListParams struct {
	Limit         int
	StartingAfter string
	EndingBefore  string
	Status        RefundStatus
	CreatedGTE    time.Time
	CreatedLT     time.Time
}
