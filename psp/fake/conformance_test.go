package fake_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"gateway/psp"
	"gateway/psp/fake"
	"gateway/psp/psptest"
)

func TestConformance(t *testing.T) {
	psptest.Run(t, func(t *testing.T) psptest.Harness {
		p := fake.New()
		return psptest.Harness{
			Adapter:   p,
			Backend:   backend{p},
			Method:    method,
			InProcess: true,
		}
	})
}

// method is the fake's payment method for each outcome the suite asks for.
func method(o psptest.Outcome, _ string) string {
	return map[psptest.Outcome]string{
		psptest.Success:       fake.MethodOK,
		psptest.DeclinedCard:  fake.MethodDeclined,
		psptest.DeclinedFunds: fake.MethodInsufficientFunds,
		psptest.DeclinedOther: fake.MethodLostCard,
		psptest.Invalid:       fake.MethodInvalidRequest,
		psptest.Pending:       fake.MethodThreeDS,
	}[o]
}

// backend maps the suite's faults onto the fake's own: an in-process PSP has
// no connection to reset or body to garble, so every way of losing an answer
// is FaultUnknownAfterCharge, and timeouts park in the charge, capture and
// void hooks.
type backend struct{ p *fake.PSP }

var _ psptest.Lapser = backend{}

func (b backend) Charges(orderID string) int  { return b.p.ChargesFor(orderID) }
func (b backend) Refunds(refundID string) int { return b.p.RefundsFor(refundID) }
func (b backend) Captures(orderID string) int { return b.p.CapturesFor(orderID) }
func (b backend) Voids(orderID string) int    { return b.p.VoidsFor(orderID) }
func (b backend) Lapse(merchantOrderID string) {
	if _, err := b.p.Lapse(merchantOrderID); err != nil {
		panic(err)
	}
}

func (b backend) Settle(orderID string, o psptest.Outcome) {
	status := psp.Succeeded
	if o != psptest.Success {
		status = psp.Declined
	}
	if _, err := b.p.Settle(orderID, status, ""); err != nil {
		panic(err)
	}
}

func (b backend) Inject(op psptest.Op, f psptest.Fault, gate *psptest.Gate) {
	var fault fake.Fault
	switch f {
	case psptest.Refuse:
		fault = fake.FaultNotProcessed
	case psptest.ErrorBefore, psptest.ResetBefore:
		fault = fake.FaultUnknownBeforeCharge
	case psptest.ErrorAfter, psptest.ResetAfter, psptest.GarbageAfter:
		fault = fake.FaultUnknownAfterCharge
	}
	// park holds one call on gate, whatever its kind.
	var once sync.Once
	park := func(ctx context.Context) { once.Do(func() { gate.Park(ctx) }) }
	switch {
	case op == psptest.OpLookup:
		b.p.FailNextLookups(1)
	case op == psptest.OpCapture && f == psptest.TimeoutBefore:
		b.p.SetCaptureHook(func(ctx context.Context, _ psp.CaptureRequest) { park(ctx) })
	case op == psptest.OpCapture && f == psptest.TimeoutAfter:
		b.p.SetCaptureHookAfter(func(ctx context.Context, _ psp.CaptureRequest, _ psp.Charge) { park(ctx) })
	case op == psptest.OpVoid && f == psptest.TimeoutBefore:
		b.p.SetVoidHook(func(ctx context.Context, _ psp.VoidRequest) { park(ctx) })
	case op == psptest.OpVoid && f == psptest.TimeoutAfter:
		b.p.SetVoidHookAfter(func(ctx context.Context, _ psp.VoidRequest, _ psp.Charge) { park(ctx) })
	case op == psptest.OpCapture && fault != 0:
		b.p.FailNextCaptures(fault, 1)
	case op == psptest.OpVoid && fault != 0:
		b.p.FailNextVoids(fault, 1)
	case op == psptest.OpCharge && f == psptest.TimeoutBefore:
		b.p.SetChargeHook(func(ctx context.Context, _ psp.ChargeRequest) { park(ctx) })
	case op == psptest.OpCharge && f == psptest.TimeoutAfter:
		b.p.SetChargeHookAfter(func(ctx context.Context, _ psp.ChargeRequest, _ psp.Charge) { park(ctx) })
	case op == psptest.OpCharge && fault != 0:
		b.p.FailNextCharges(fault, 1)
	case op == psptest.OpRefund && fault != 0:
		b.p.FailNextRefunds(fault, 1)
	default:
		panic(fmt.Sprintf("fake backend: cannot inject %s into %s", f, op))
	}
}
