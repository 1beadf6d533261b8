package metrics

import (
	"context"
	"errors"
	"time"

	"gateway/psp"
)

// InstrumentPSP wraps an adapter so that every call is counted by outcome
// class and timed. The wrapper changes no result, and keeps what the
// adapter is: a psp.Capturer stays one, its captures and voids counted.
func InstrumentPSP(a psp.Adapter, m *Metrics) psp.Adapter {
	name := a.Capabilities().Name
	ops := []string{"charge", "lookup", "refund", "lookup_refund"}
	c, capturer := a.(psp.Capturer)
	if capturer {
		ops = append(ops, "capture", "void")
	}
	for _, op := range ops {
		for _, outcome := range []string{"result", "not_found", "not_processed", "rejected", "unknown"} {
			m.pspCalls.WithLabelValues(name, op, outcome)
		}
	}
	i := &instrumented{Adapter: a, m: m, name: name}
	if capturer {
		return &instrumentedCapturer{instrumented: i, c: c}
	}
	return i
}

type instrumented struct {
	psp.Adapter
	m    *Metrics
	name string
}

// Unwrap returns the adapter it counts the calls of.
func (i *instrumented) Unwrap() psp.Adapter { return i.Adapter }

func (i *instrumented) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	start := time.Now()
	c, err := i.Adapter.Charge(ctx, req)
	i.m.PSPCall(i.name, "charge", outcomeOf(err), time.Since(start))
	return c, err
}

func (i *instrumented) Lookup(ctx context.Context, orderID string) (psp.Charge, error) {
	start := time.Now()
	c, err := i.Adapter.Lookup(ctx, orderID)
	i.m.PSPCall(i.name, "lookup", outcomeOf(err), time.Since(start))
	return c, err
}

func (i *instrumented) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	start := time.Now()
	r, err := i.Adapter.Refund(ctx, req)
	i.m.PSPCall(i.name, "refund", outcomeOf(err), time.Since(start))
	return r, err
}

func (i *instrumented) LookupRefund(ctx context.Context, chargeReference, refundOrderID string) (psp.Refund, error) {
	start := time.Now()
	r, err := i.Adapter.LookupRefund(ctx, chargeReference, refundOrderID)
	i.m.PSPCall(i.name, "lookup_refund", outcomeOf(err), time.Since(start))
	return r, err
}

// instrumentedCapturer is instrumented for an adapter that captures and
// voids later.
type instrumentedCapturer struct {
	*instrumented
	c psp.Capturer
}

var _ psp.Capturer = (*instrumentedCapturer)(nil)

func (i *instrumentedCapturer) Capture(ctx context.Context, req psp.CaptureRequest) (psp.Charge, error) {
	start := time.Now()
	c, err := i.c.Capture(ctx, req)
	i.m.PSPCall(i.name, "capture", outcomeOf(err), time.Since(start))
	return c, err
}

func (i *instrumentedCapturer) Void(ctx context.Context, req psp.VoidRequest) (psp.Charge, error) {
	start := time.Now()
	c, err := i.c.Void(ctx, req)
	i.m.PSPCall(i.name, "void", outcomeOf(err), time.Since(start))
	return c, err
}

// outcomeOf names a call's outcome class; an unclassified error counts as
// unknown, as the payment flow treats it.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "result"
	case errors.Is(err, psp.ErrNotFound):
		return "not_found"
	}
	switch c, _ := psp.ClassOf(err); c {
	case psp.NotProcessed:
		return "not_processed"
	case psp.Rejected:
		return "rejected"
	}
	return "unknown"
}
