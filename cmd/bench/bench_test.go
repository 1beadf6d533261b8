package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestEveryScenarioRuns runs the whole benchmark briefly against the test
// database to prove the tool works. It asserts what must hold at any speed
// (every scenario reports, the hammered key was charged exactly once) and no
// timing or ratio: those depend on the machine.
func TestEveryScenarioRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every scenario against a real database")
	}
	jsonFile := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{
		"--duration", "300ms", "--warmup", "50ms", "--rounds", "2",
		"--replay-keys", "64", "--reconcile-rows", "200",
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
	for sc := scFresh; sc <= scWebhooks; sc++ {
		if seen[sc] == 0 {
			t.Errorf("scenario %d is missing from the report", sc)
		}
	}
	if seen[scReconcile] != 2 {
		t.Errorf("reconcile rows: %d, want one for 1 and one for 3 reconcilers", seen[scReconcile])
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
		{in: "all", want: []int{1, 2, 3, 4, 5, 6}},
		{in: "webhooks", want: []int{6}},
		{in: "4,1", want: []int{1, 4}},
		{in: "replay, hammer", want: []int{2, 4}},
		{in: "7", bad: true},
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
