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
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/routing"
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
		"--replay-keys", "64", "--reconcile-rows", "200", "--books-lines", "2000",
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
	if seen[scRoutes] != 2 {
		t.Errorf("routes rows: %d, want the throughput's and the statements'", seen[scRoutes])
	}
	if len(rep.Routes) != 2*2 {
		t.Fatalf("routes checks: %d, want one per phase of 2 rounds", len(rep.Routes))
	}
	for _, c := range rep.Routes {
		if !c.OK || c.Created == 0 || c.Statements.All == 0 || len(c.Charges) != c.Accounts {
			t.Errorf("routes phase %s: %+v", c.Phase, c)
		}
		for _, a := range c.Charges {
			if a.Ledger == 0 {
				t.Errorf("routes phase %s: account %s charged nothing", c.Phase, a.Account)
			}
		}
	}
	if seen[scBooks] != 3 {
		t.Errorf("books rows: %d, want the pass's, its heap's and the fresh payments'", seen[scBooks])
	}
	if len(rep.Books) != 1 || !rep.Books[0].Check.OK {
		t.Errorf("books: %+v, want one pass that found what was planted", rep.Books)
	}
	if len(rep.Violations) != 0 {
		t.Errorf("violations: %v", rep.Violations)
	}
}

// TestRoutesChecks feeds the routes scenario's checks what a phase could
// count: each must fail on its own fault and hold otherwise.
func TestRoutesChecks(t *testing.T) {
	even := func() routesCheck {
		return routesCheck{Accounts: 2, Answers: 1000, Created: 1000, Charges: []accountCharges{
			{Account: "fake_a", Ledger: 510, Succeeded: 510, ChargeCalls: 510, DBPayments: 510},
			{Account: "fake_b", Ledger: 490, Succeeded: 490, ChargeCalls: 490, DBPayments: 490},
		}}
	}
	for _, tc := range []struct {
		name  string
		alter func(*routesCheck)
		ok    bool
	}{
		{name: "even", alter: func(*routesCheck) {}, ok: true},
		{name: "one account unused", alter: func(c *routesCheck) {
			c.Charges[0].Ledger, c.Charges[0].Succeeded, c.Charges[0].ChargeCalls, c.Charges[0].DBPayments = 1000, 1000, 1000, 1000
			c.Charges[1] = accountCharges{Account: "fake_b"}
		}},
		{name: "split 60:40", alter: func(c *routesCheck) {
			c.Charges[0].Ledger, c.Charges[0].Succeeded, c.Charges[0].ChargeCalls, c.Charges[0].DBPayments = 600, 600, 600, 600
			c.Charges[1].Ledger, c.Charges[1].Succeeded, c.Charges[1].ChargeCalls, c.Charges[1].DBPayments = 400, 400, 400, 400
		}},
		{name: "a second Charge call", alter: func(c *routesCheck) { c.Charges[1].ChargeCalls++ }},
		{name: "a charge without its 201", alter: func(c *routesCheck) { c.Created-- }},
		{name: "charged at another account than the payment names", alter: func(c *routesCheck) {
			c.Charges[0].DBPayments--
			c.Charges[1].DBPayments++
		}},
		{name: "a payment naming an unknown account", alter: func(c *routesCheck) { c.OtherDBPayments = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := even()
			tc.alter(&c)
			c.verify()
			if c.OK != tc.ok {
				t.Errorf("ok %v, want %v: %v", c.OK, tc.ok, c.Problems)
			}
		})
	}
	if tol := routesShareTolerance(100); tol != 0.25 {
		t.Errorf("tolerance for 100 charges: %v, want 5 standard deviations, 0.25", tol)
	}

	phase := func(stmts, answers int64) routesCheck { return routesCheck{StatementsTotal: stmts, Answers: answers} }
	one := []routesCheck{phase(11000, 1000), phase(22000, 2000)}
	if s1, s2, ok := routesStatementsHeld(one, []routesCheck{phase(11040, 1000), phase(22000, 2000)}); !ok || s1 != 11 {
		t.Errorf("0.013 more per payment: %v vs %v, held %v; want held", s2, s1, ok)
	}
	if s1, s2, ok := routesStatementsHeld(one, []routesCheck{phase(12000, 1000), phase(24000, 2000)}); ok {
		t.Errorf("one more statement per payment: %v vs %v held", s2, s1)
	}

	before := map[int64]statementCounts{1: {Questions: 10, Select: 3}, 2: {Questions: 5, Select: 1}}
	after := map[int64]statementCounts{1: {Questions: 21, Select: 5, Insert: 4}, 2: {Questions: 6, Select: 2}}
	sum, opened, closed := poolStatements(before, after)
	if sum != (statementCounts{Questions: 10, Select: 1, Insert: 4}) || opened != 0 || closed != 0 {
		t.Errorf("pool statements %+v, opened %d, closed %d; want the reads of the counters left out", sum, opened, closed)
	}
}

// TestRoutedPaymentIssuesTheSameStatements makes payments through a
// service whose route splits them between two accounts, each watched by
// its breaker, and through one with one account, each over a connection
// that records what it sends: choosing the account must add no statement.
func TestRoutedPaymentIssuesTheSameStatements(t *testing.T) {
	ctx := context.Background()
	dbe, err := openDatabase(ctx, os.Getenv, newProgress(io.Discard), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dbe.cleanup() })
	cfg := serviceConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	service := func(psps *payments.PSPs) (*payments.Service, *recorder, string) {
		db, rec := openRecorded(t, dbe.dsn)
		st := mysql.NewStore(db)
		merchant, key, err := merchants.NewMerchant("Routes check", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CreateMerchant(ctx, merchant, key); err != nil {
			t.Fatal(err)
		}
		return payments.NewService(st, psps, cfg), rec, merchant.ID
	}
	a, b := fake.New(), fake.New()
	two, err := payments.NewPSPs("fake_a", map[string]psp.Adapter{"fake_a": a, "fake_b": b})
	if err != nil {
		t.Fatal(err)
	}
	if err := two.WithRoutes(routing.Table{Default: routing.Route{{Account: "fake_a", Weight: 1}, {Account: "fake_b", Weight: 1}}},
		routing.NewHealth(two.Names(), routing.DefaultBreaker, nil)); err != nil {
		t.Fatal(err)
	}
	oneSvc, oneRec, oneMerchant := service(payments.OnePSP(fake.New()))
	twoSvc, twoRec, twoMerchant := service(two)

	pay := func(svc *payments.Service, rec *recorder, merchantID, key string) []string {
		t.Helper()
		rec.take()
		out, err := svc.Create(ctx, createRequest(merchantID, key))
		if err != nil || out.Replayed || out.Response.Status != 201 {
			t.Fatalf("payment %s: %+v, %v", key, out, err)
		}
		var got []string
		for _, s := range rec.take() {
			got = append(got, s.String())
		}
		return got
	}
	want := pay(oneSvc, oneRec, oneMerchant, "routes-one-0")
	for i := 0; a.ChargeCount() == 0 || b.ChargeCount() == 0; i++ {
		if i == 64 {
			t.Fatalf("64 payments did not reach both accounts: fake_a %d, fake_b %d", a.ChargeCount(), b.ChargeCount())
		}
		if got := pay(twoSvc, twoRec, twoMerchant, fmt.Sprintf("routes-two-%d", i)); !slices.Equal(got, want) {
			t.Fatalf("a payment routed between two accounts sent\n  %s\nwhere one account's sent\n  %s",
				strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

func TestParseScenarios(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "all", want: []int{1, 2, 3, 4, 5, 6, 7, 9, 10, 11}},
		{in: "routes", want: []int{10}},
		{in: "books,1", want: []int{1, 11}},
		{in: "10,capture", want: []int{9, 10}},
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
