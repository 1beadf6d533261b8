package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gateway/merchants"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp/fake"
)

// TestEveryScenarioRuns runs the whole benchmark briefly against the test
// database to prove the tool works. It asserts what must hold at any speed
// (every scenario reports, the hammered key was charged exactly once) and no
// timing or ratio: those depend on the machine.
func TestEveryScenarioRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every scenario against a real database: make proofs runs it")
	}
	jsonFile := filepath.Join(t.TempDir(), "bench.json")
	charts := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{
		"--duration", "300ms", "--warmup", "50ms", "--rounds", "2",
		"--replay-keys", "64", "--reconcile-rows", "200",
		"--charts", charts, "--sweep", "1,8", "--sweep-duration", "200ms",
		"--json", jsonFile,
	}, os.Getenv, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"SCENARIO", "THROUGHPUT", "P99", "FLOOR", "RATIO", "MET?", "Peak RSS", "max_open=32"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout.String())
		}
	}

	for _, f := range []string{"throughput-vs-clients.svg", "p99-vs-clients.svg"} {
		svg, err := os.ReadFile(filepath.Join(charts, f))
		if err != nil || !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("chart %s: %v", f, err)
		}
	}

	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("--json output: %v", err)
	}
	seen := map[int]int{}
	for _, r := range rep.Rows {
		seen[r.Scenario]++
	}
	for _, sc := range allScenarios() {
		if seen[sc] == 0 {
			t.Errorf("scenario %d is missing from the report", sc)
		}
	}
	if seen[scReconcile] != 2 {
		t.Errorf("reconcile rows: %d, want one for 1 and one for 3 reconcilers", seen[scReconcile])
	}
	if len(rep.Sweep) != 2 {
		t.Errorf("sweep: %d points, want 2", len(rep.Sweep))
	}
	if len(rep.Hammer) == 0 {
		t.Fatal("no hammer check in the report")
	}
	for _, h := range rep.Hammer {
		if h.GatewayCharges != 1 || h.LedgerCharges != 1 || h.DBPayments != 1 || !h.OK {
			t.Errorf("hammered key: %+v, want exactly one charge and one payment", h)
		}
	}
	if len(rep.Violations) != 0 {
		t.Errorf("violations: %v", rep.Violations)
	}
}

func TestParseScenarios(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "all", want: []int{1, 2, 3, 4, 5, 6, 7, 9}},
		{in: "webhooks", want: []int{6}},
		{in: "refund,1", want: []int{1, 7}},
		{in: "capture,refund", want: []int{7, 9}},
		{in: "9", want: []int{9}},
		{in: "4,1", want: []int{1, 4}},
		{in: "replay, hammer", want: []int{2, 4}},
		{in: "8", bad: true},
		{in: "fast", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseScenarios(tc.in)
			if (err != nil) != tc.bad {
				t.Fatalf("err %v", err)
			}
			if !tc.bad && !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFloorIssuesTheFlowsStatements runs one fresh payment, one fresh
// refund, one authorization and its capture through the payment service
// and through the floor, each over a connection that records what it
// sends, and fails when the two differ in any statement, its order, its
// transaction boundaries or the kinds of its arguments: the floor is the
// flow's own database work, or its ratio means nothing.
func TestFloorIssuesTheFlowsStatements(t *testing.T) {
	ctx := context.Background()
	dbe, err := openDatabase(ctx, os.Getenv, newProgress(io.Discard), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dbe.cleanup() })
	flowDB, flowRec := openRecorded(t, dbe.dsn)
	floorDB, floorRec := openRecorded(t, dbe.dsn)
	st := mysql.NewStore(flowDB)
	merchant, key, err := merchants.NewMerchant("Floor check", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateMerchant(ctx, merchant, key); err != nil {
		t.Fatal(err)
	}
	cfg := serviceConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := payments.NewService(st, payments.OnePSP(fake.New()), cfg)
	b := &bench{floor: floorDB, gw: &gateway{merchant: merchant}, floorFP: sha256.Sum256([]byte("floor"))}
	b.renderFloorResponses(merchant.ID)

	compare := func(what string, flow, floor []statement) {
		t.Helper()
		if !slices.EqualFunc(flow, floor, func(a, b statement) bool { return a.String() == b.String() }) {
			var sb strings.Builder
			fmt.Fprintf(&sb, "the floor's %s differs from the flow's.\nflow (%d):\n", what, len(flow))
			for _, s := range flow {
				fmt.Fprintf(&sb, "  %s\n", s)
			}
			fmt.Fprintf(&sb, "floor (%d):\n", len(floor))
			for _, s := range floor {
				fmt.Fprintf(&sb, "  %s\n", s)
			}
			t.Error(sb.String())
		}
	}

	req := createRequest(merchant.ID, "drift-pay-1")
	flowRec.take()
	out, err := svc.Create(ctx, req)
	if err != nil || out.Replayed || out.Response.Status != 201 {
		t.Fatalf("fresh payment: %+v, %v", out, err)
	}
	flow := flowRec.take()
	if err := b.floorFresh(ctx, "drift-floor-1", 0); err != nil {
		t.Fatal(err)
	}
	compare("fresh payment", flow, floorRec.take())

	// A refund of that payment (the floor refunds one of its own).
	rreq := refundRequest(merchant.ID, out.SubjectID, "drift-refund-1")
	flowRec.take()
	rout, err := svc.CreateRefund(ctx, rreq)
	if err != nil || rout.Replayed || rout.Response.Status != 201 {
		t.Fatalf("fresh refund: %+v, %v", rout, err)
	}
	flow = flowRec.take()
	payID, err := b.floorPaymentID(ctx, "drift-floor-1")
	if err != nil {
		t.Fatal(err)
	}
	floorRec.take()
	if err := b.floorRefund(ctx, payID, "drift-floor-refund-1"); err != nil {
		t.Fatal(err)
	}
	compare("fresh refund", flow, floorRec.take())

	// An authorization, then its capture (the floor captures one of its own).
	flowRec.take()
	aout, err := svc.Create(ctx, authorizationRequest(merchant.ID, "drift-auth-1"))
	if err != nil || aout.Replayed || aout.Response.Status != 201 {
		t.Fatalf("authorization: %+v, %v", aout, err)
	}
	flow = flowRec.take()
	floorRec.take()
	authID, err := b.floorAuthorize(ctx, "drift-floor-auth-1")
	if err != nil {
		t.Fatal(err)
	}
	compare("authorization", flow, floorRec.take())

	flowRec.take()
	cout, err := svc.Capture(ctx, payments.CaptureRequest{MerchantID: merchant.ID, PaymentID: aout.SubjectID, IdempotencyKey: "drift-capture-1"})
	if err != nil || cout.Replayed || cout.Response.Status != 201 {
		t.Fatalf("capture: %+v, %v", cout, err)
	}
	flow = flowRec.take()
	floorRec.take()
	if err := b.floorCapture(ctx, authID, "drift-floor-capture-1", 0); err != nil {
		t.Fatal(err)
	}
	compare("capture", flow, floorRec.take())
	var captured int
	if err := floorDB.GetContext(ctx, &captured, `SELECT COUNT(*) FROM payments WHERE id IN (?, ?) AND status = 'succeeded'
AND amount_captured = 12500 AND op_kind IS NULL`, aout.SubjectID, authID); err != nil {
		t.Fatal(err)
	}
	if captured != 2 {
		t.Errorf("%d of the flow's and the floor's authorizations captured in full, want 2", captured)
	}
}
