package books

import (
	"fmt"
	"testing"
)

func TestSeenHoldsWhatWasAddedAndNothingElse(t *testing.T) {
	s := newSeen()
	if s.has("ord_1") {
		t.Fatal("an empty set has ord_1")
	}
	for i := range 10_000 {
		s.add(fmt.Sprintf("ord_%d", i))
		if i%3 == 0 {
			s.add(fmt.Sprintf("ord_%d", i)) // a line read twice (the overlap, a reread)
		}
	}
	for i := range 10_000 {
		if !s.has(fmt.Sprintf("ord_%d", i)) {
			t.Fatalf("ord_%d not seen", i)
		}
		if s.has(fmt.Sprintf("ord_%d", 10_000+i)) || s.has(fmt.Sprintf("psp:ord_%d", i)) {
			t.Fatalf("a subject never added is seen (%d)", i)
		}
	}
	if len(s.sums) != 10_000 {
		t.Fatalf("%d sums held for 10,000 subjects", len(s.sums))
	}
	// Lines read after the set was asked are found too.
	s.add("rfd_late")
	if !s.has("rfd_late") || !s.has("ord_42") {
		t.Fatal("a subject added after a lookup is lost")
	}
}
