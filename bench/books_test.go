package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gateway/books"
)

// TestBooksFindsThePlantedDiscrepancies runs scenario 11 at its default
// size against the test database: the pass must check every ledger line
// and find the planted orphans, changed amounts and missing charges, each
// once, with their payments in review, and nothing else. No timing or
// ratio is asserted.
func TestBooksFindsThePlantedDiscrepancies(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a history on a real database: make proofs runs it")
	}
	jsonFile := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--scenarios", "books", "--duration", "300ms", "--warmup", "50ms",
		"--charts", "", "--json", jsonFile}, os.Getenv, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("--json output: %v", err)
	}
	if len(rep.Books) != 1 {
		t.Fatalf("%d books reports, want 1", len(rep.Books))
	}
	r := rep.Books[0]
	c := r.Check
	want := map[books.Class]int{books.OrphanCharge: booksOrphans, books.Mismatch: booksChanged, books.MissingAtPSP: booksMissing}
	for _, cl := range books.Classes {
		if c.Found[cl] != want[cl] || c.Planted[cl] != want[cl] {
			t.Errorf("%s: found %d, planted %d; want %d", cl, c.Found[cl], c.Planted[cl], want[cl])
		}
	}
	const lines = 20_000 // --books-lines' default
	if !c.OK || c.Status != books.RunComplete || c.Lines != lines || c.Matched != lines-booksOrphans-booksChanged ||
		c.New != booksOrphans+booksChanged+booksMissing || c.InReview != c.New || len(c.Unplanted) != 0 {
		t.Errorf("check %+v, want every line checked and exactly the planted discrepancies", c)
	}
	if r.HistoryRows != booksPerLine*lines || r.Seconds <= 0 || r.LinesPerSecond <= 0 || r.Heap.Peak <= 0 || r.Heap.Ledger <= 0 {
		t.Errorf("report %+v lacks its figures", r)
	}
	if len(r.LoadedPasses) == 0 {
		t.Error("no pass ran under load")
	}
	for _, p := range r.LoadedPasses {
		if p.Error != "" || p.Status != books.RunComplete || p.Lines != lines || p.New != 0 {
			t.Errorf("pass under load %+v, want a complete rerun finding nothing new", p)
		}
	}
	if len(rep.Violations) != 0 {
		t.Errorf("violations: %v", rep.Violations)
	}
	for _, want := range []string{"11 books: one pass", "peak Go heap", "during books passes", "Books passes"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestBooksCheck feeds the books check what a pass could report: each
// fault must fail it on its own, and the planted outcome hold.
func TestBooksCheck(t *testing.T) {
	planted := func() booksCheck {
		return booksCheck{Status: books.RunComplete, Lines: 1000, WantLines: 1000, Matched: 980, WantMatched: 980,
			Checked: 990, WantChecked: 990, New: 30, InReview: 30, WantInReview: 30,
			Found:   map[books.Class]int{books.OrphanCharge: 10, books.Mismatch: 10, books.MissingAtPSP: 10},
			Planted: map[books.Class]int{books.OrphanCharge: 10, books.Mismatch: 10, books.MissingAtPSP: 10}}
	}
	for _, tc := range []struct {
		name  string
		alter func(*booksCheck)
		ok    bool
	}{
		{name: "as planted", alter: func(*booksCheck) {}, ok: true},
		{name: "run incomplete", alter: func(c *booksCheck) { c.Status, c.Error = books.RunIncomplete, "listing failed" }},
		{name: "run incomplete after every line", alter: func(c *booksCheck) { c.Status = books.RunIncomplete }},
		{name: "a line unchecked", alter: func(c *booksCheck) { c.Lines-- }},
		{name: "a line not matched", alter: func(c *booksCheck) { c.Matched-- }},
		{name: "a record unchecked", alter: func(c *booksCheck) { c.Checked-- }},
		{name: "an orphan missed", alter: func(c *booksCheck) { c.Found[books.OrphanCharge]--; c.New--; c.InReview-- }},
		{name: "a mismatch too many", alter: func(c *booksCheck) { c.Found[books.Mismatch]++; c.New++ }},
		{name: "a changed amount taken for a missing charge", alter: func(c *booksCheck) {
			c.Found[books.Mismatch]--
			c.Found[books.MissingAtPSP]++
		}},
		{name: "an orphan refund", alter: func(c *booksCheck) { c.Found[books.OrphanRefund] = 1 }},
		{name: "found before, not by this pass", alter: func(c *booksCheck) { c.New = 0 }},
		{name: "a payment left out of review", alter: func(c *booksCheck) { c.InReview-- }},
		{name: "an unplanted subject", alter: func(c *booksCheck) { c.Unplanted = []string{"mismatch ord_x"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := planted()
			tc.alter(&c)
			c.verify()
			if c.OK != tc.ok {
				t.Errorf("ok %v, want %v: %v", c.OK, tc.ok, c.Problems)
			}
		})
	}
}
