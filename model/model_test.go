package model

import (
	"strings"
	"testing"
)

// TestModels checks the smaller worlds of the suite (in the charge model
// client 2 sends one request): every property holds, every mutant and
// every finding, with its fix undone, is caught by the property it breaks.
// `make model` checks the full worlds.
func TestModels(t *testing.T) {
	if testing.Short() {
		t.Skip("checks the model's smaller worlds (about a minute): make proofs runs it, make model the full worlds")
	}
	tools, err := FindTools()
	if err != nil {
		t.Skipf("protocol model not checked: %v", err)
	}
	for _, c := range Suite(true) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			r, err := Run(t.Context(), tools, dir, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d states, %.3g transitions, %.0f MB, %s", c.What, r.States, r.Transitions, r.MemoryMB, r.Elapsed)
			if r.OK() {
				return
			}
			story := ""
			if r.Violated != "" {
				if story, err = Trail(t.Context(), tools, dir, c); err != nil {
					t.Log(err)
				}
			}
			if len(c.Expect) == 0 {
				t.Fatalf("%s violated:\n%s", r.Violated, story)
			}
			t.Fatalf("expected a violation of %s, pan found %q\n%s", strings.Join(c.Expect, " or "), r.Violated, story)
		})
	}
}

// TestParse pins the reading of pan's report: a verdict drawn from it must
// name the right property, and an incomplete search must never pass.
func TestParse(t *testing.T) {
	cases := []struct {
		name, out string
		want      string
		wantErr   bool
	}{
		{"holds", "State-vector 120 byte, depth reached 819, errors: 0\n   3966062 states, stored\n" +
			"1.1e+07 transitions (= stored+matched)\n  976.408\ttotal actual memory usage\npan: elapsed time 19.1 seconds\n", "", false},
		{"assertion", "pan:1: assertion violated (p1_once||(charges<=1)) (at depth 74)\n" +
			"State-vector 120 byte, depth reached 74, errors: 1\n       23 states, stored\n", "p1_once", false},
		{"nested assertion", "pan:1: assertion violated (((p2_agree|| !((kstate==2)))||(pstatus==5))) (at depth 1)\n" +
			"depth reached 1, errors: 1\n", "p2_agree", false},
		{"acceptance", "pan:1: acceptance cycle (at depth 569)\ndepth reached 1056, errors: 1\n", "p5", false},
		{"incomplete", "error: max search depth too small\ndepth reached 99999, errors: 0\n", "", true},
		{"stopped at the error", "pan:1: assertion violated (p3_fence||(holder==me)) (at depth 9)\n" +
			"Warning: Search not completed\ndepth reached 9, errors: 1\n", "p3_fence", false},
		{"garbage", "segmentation fault\n", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Result{Check: Check{LTL: "p5"}, Output: tc.out}
			err := parse(&r)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parse: err = %v, want error %v", err, tc.wantErr)
			}
			if r.Violated != tc.want {
				t.Fatalf("Violated = %q, want %q", r.Violated, tc.want)
			}
		})
	}
}
