package books

import (
	"cmp"
	"hash/maphash"
	"slices"
)

// seen is the set of the subjects (order ids, refund order ids, "psp:"
// references) of the ledger lines a pass read. The gateway's phase asks it
// once per record of the period, so a pass over a million lines holds a
// million subjects: as two 64-bit hashes each under the pass's own random
// seeds, in one slice sorted when first asked, it costs 16 bytes a line
// whatever the subjects' length, where a map of strings takes about five
// times that. Two subjects share both hashes with a chance of 2^-128: no
// record is taken for seen that the ledger did not show.
type seen struct {
	seeds  [2]maphash.Seed
	sums   []sum
	sorted bool
}

type sum struct{ a, b uint64 }

func newSeen() *seen {
	return &seen{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, sorted: true}
}

func (s *seen) sum(subject string) sum {
	return sum{maphash.String(s.seeds[0], subject), maphash.String(s.seeds[1], subject)}
}

func compareSums(x, y sum) int {
	if c := cmp.Compare(x.a, y.a); c != 0 {
		return c
	}
	return cmp.Compare(x.b, y.b)
}

// add records a line's subject.
func (s *seen) add(subject string) {
	s.sums = append(s.sums, s.sum(subject))
	s.sorted = false
}

// has reports whether a line with this subject was read.
func (s *seen) has(subject string) bool {
	if !s.sorted {
		slices.SortFunc(s.sums, compareSums)
		s.sums = slices.Clip(slices.Compact(s.sums))
		s.sorted = true
	}
	_, ok := slices.BinarySearchFunc(s.sums, s.sum(subject), compareSums)
	return ok
}
