package idemkeys

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestReplayCacheKeepsOnlyFinalAnswersWhileRetained(t *testing.T) {
	ref := Ref{MerchantID: "m", Endpoint: "POST /payments", Key: "k"}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := NewReplayCache(1<<20, 2*time.Hour)
	c.Put(ref, Cached{Response: Response{Status: http.StatusAccepted}, Expires: t0.Add(time.Hour)}, t0)
	if _, ok := c.Get(ref, t0); ok {
		t.Fatal("a 202 under review was kept: ops may still rewrite it")
	}
	c.Put(ref, Cached{SubjectID: "pay_1", Response: Response{Status: http.StatusCreated}, Expires: t0.Add(time.Hour)}, t0)
	if e, ok := c.Get(ref, t0.Add(time.Hour-time.Second)); !ok || e.SubjectID != "pay_1" {
		t.Fatal("a final answer within retention was not kept")
	}
	if _, ok := c.Get(ref, t0.Add(time.Hour)); ok {
		t.Fatal("an answer past retention was replayed from memory")
	}
	if _, ok := NewReplayCache(0, time.Hour).Get(ref, t0); ok {
		t.Fatal("a disabled cache answered")
	}
	// An answer is kept for the cache's ttl at most, however long its key
	// is retained: the bound on replaying one rewritten elsewhere.
	short := NewReplayCache(1<<20, time.Minute)
	short.Put(ref, Cached{SubjectID: "pay_1", Response: Response{Status: http.StatusPaymentRequired}, Expires: t0.Add(time.Hour)}, t0)
	if _, ok := short.Get(ref, t0.Add(time.Minute-time.Millisecond)); !ok {
		t.Fatal("an answer within the ttl was not kept")
	}
	if _, ok := short.Get(ref, t0.Add(time.Minute)); ok {
		t.Fatal("an answer was replayed from memory past the ttl")
	}
}

// The cache is bounded by bytes, not entries: whatever the answers' sizes it
// holds at most its bound, evicts the least recently used answer first, and
// one merchant filling it at full speed pushes out only its own answers.
func TestReplayCacheIsBoundedByBytesAndShared(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const bound = 1 << 20
	c := NewReplayCache(bound, time.Hour)
	answer := func(n int) Cached {
		return Cached{SubjectID: "pay_1", Response: Response{Status: http.StatusCreated, Body: make([]byte, n)}, Expires: t0.Add(time.Hour)}
	}
	ref := func(merchant string, i int) Ref {
		return Ref{MerchantID: merchant, Endpoint: "POST /payments", Key: fmt.Sprint("k", i)}
	}
	// Three quiet merchants, a few answers each.
	for _, m := range []string{"a", "b", "c"} {
		for i := range 10 {
			c.Put(ref(m, i), answer(1000), t0)
		}
	}
	// One loud merchant: 10,000 answers of up to 71 KB, ~700 MB all told.
	for i := range 10_000 {
		c.Put(ref("loud", i), answer(1000+(i*7919)%70_000), t0)
		if i%1000 == 0 {
			_, _ = c.Get(ref("a", 0), t0) // merchant a's first key stays in use
		}
		if total, loud := c.Size("loud"); total > bound || loud > bound/replayMerchantShare {
			t.Fatalf("after %d puts: %d bytes held (bound %d), %d by one merchant (share %d)", i+1, total, bound, loud, bound/replayMerchantShare)
		}
	}
	for _, m := range []string{"a", "b", "c"} {
		for i := range 10 {
			if _, ok := c.Get(ref(m, i), t0); !ok {
				t.Fatalf("merchant %s's answer %d was pushed out by another merchant", m, i)
			}
		}
	}
	if _, ok := c.Get(ref("loud", 0), t0); ok {
		t.Fatal("the loud merchant's oldest answer outlived its newest")
	}
	if _, ok := c.Get(ref("loud", 9_999), t0); !ok {
		t.Fatal("the loud merchant's newest answer was not kept")
	}
	// Recency decides among everyone once the cache is full: answers used
	// lately stay, the ones nobody asked for go first.
	for _, m := range []string{"d", "e", "f", "g", "h"} {
		for i := range 200 {
			c.Put(ref(m, i), answer(1000), t0)
			_, _ = c.Get(ref("a", 0), t0)
		}
	}
	if total, _ := c.Size(""); total > bound {
		t.Fatalf("%d bytes held, bound %d", total, bound)
	}
	if _, ok := c.Get(ref("a", 0), t0); !ok {
		t.Fatal("the answer used all along was evicted")
	}
	if _, ok := c.Get(ref("b", 0), t0); ok {
		t.Fatal("an answer nobody asked for outlived the ones in use")
	}
}

func TestPacerLetsABurstThroughThenSpacesReplays(t *testing.T) {
	p := NewPacer()
	hot, cold := Ref{Key: "hot"}, Ref{Key: "cold"}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// GCRA lets the burst plus the one replay whose slot is due right now through.
	for i := range replayBurst + 1 {
		if d := p.Reserve(hot, now); d > 0 {
			t.Fatalf("replay %d of the burst delayed %s", i+1, d)
		}
	}
	if d := p.Reserve(hot, now); d != replaySpacing {
		t.Fatalf("first replay past the burst delayed %s, want %s", d, replaySpacing)
	}
	if d := p.Reserve(hot, now); d != 2*replaySpacing {
		t.Fatalf("second replay past the burst delayed %s, want %s", d, 2*replaySpacing)
	}
	if d := p.Reserve(cold, now); d > 0 {
		t.Fatalf("another key was delayed %s", d)
	}
	if d := p.Reserve(hot, now.Add(2*time.Second)); d > 0 {
		t.Fatalf("a key quiet for 2 s was still delayed %s", d)
	}
}
