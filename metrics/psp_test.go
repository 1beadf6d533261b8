package metrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"gateway/metrics"
	"gateway/psp"
	"gateway/psp/fake"
)

// The wrapper that counts an adapter's calls keeps what the adapter is: an
// adapter that captures and voids later (psp.Capturer) is still one once
// wrapped, its captures and voids counted; one that cannot stays one that
// cannot. Without it, every replica refuses manual capture.
func TestInstrumentedPSPKeepsCapturer(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a := metrics.InstrumentPSP(fake.New(), metrics.New(reg))
	c, ok := a.(psp.Capturer)
	if !ok {
		t.Fatal("an instrumented Capturer is no psp.Capturer")
	}
	for i, void := range []bool{false, true} {
		order := []string{"ord_capture", "ord_void"}[i]
		auth, err := a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: order, Amount: 1000, Currency: "KRW",
			PaymentMethod: fake.MethodOK, CaptureMethod: psp.CaptureManual})
		if err != nil || auth.Status != psp.Authorized {
			t.Fatalf("authorize: %+v %v", auth, err)
		}
		var got psp.Charge
		if void {
			got, err = c.Void(ctx, psp.VoidRequest{OrderID: "vod_1", MerchantOrderID: order, ChargeReference: auth.Reference})
		} else {
			got, err = c.Capture(ctx, psp.CaptureRequest{OrderID: "cap_1", MerchantOrderID: order, ChargeReference: auth.Reference,
				Amount: 600, Currency: "KRW"})
		}
		if want := map[bool]psp.ChargeStatus{false: psp.Succeeded, true: psp.Voided}[void]; err != nil || got.Status != want {
			t.Fatalf("void %t: %+v %v, want %s", void, got, err, want)
		}
	}
	for _, op := range []string{"capture", "void"} {
		const q = "gateway_psp_calls_total"
		if got := counterValue(t, reg, q, map[string]string{"adapter": "fake", "op": op, "outcome": "result"}); got != 1 {
			t.Errorf("%s{op=%q,outcome=\"result\"} = %v, want 1", q, op, got)
		}
	}

	// An adapter that cannot capture later is not made one.
	if _, ok := metrics.InstrumentPSP(chargesOnly{fake.New()}, metrics.New(prometheus.NewRegistry())).(psp.Capturer); ok {
		t.Error("an instrumented adapter that is no Capturer became one")
	}
}

// chargesOnly is an adapter with nothing but psp.Adapter's methods.
type chargesOnly struct{ psp.Adapter }

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
