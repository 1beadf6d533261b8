package payments

import (
	"net/http"
	"testing"
	"time"

	"gateway/idemkeys"
)

func TestReplayCacheKeepsOnlyFinalAnswersWhileRetained(t *testing.T) {
	ref := idemkeys.Ref{MerchantID: "m", Endpoint: EndpointCreatePayment, Key: "k"}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := newReplayCache(10, time.Hour)
	c.put(ref, cachedReplay{resp: idemkeys.Response{Status: http.StatusAccepted}, expires: t0.Add(time.Hour)})
	if _, ok := c.get(ref, t0); ok {
		t.Fatal("a 202 under review was kept: ops may still rewrite it")
	}
	c.put(ref, cachedReplay{paymentID: "pay_1", resp: idemkeys.Response{Status: http.StatusCreated}, expires: t0.Add(time.Hour)})
	if e, ok := c.get(ref, t0.Add(time.Hour-time.Second)); !ok || e.paymentID != "pay_1" {
		t.Fatal("a final answer within retention was not kept")
	}
	if _, ok := c.get(ref, t0.Add(time.Hour)); ok {
		t.Fatal("an answer past retention was replayed from memory")
	}
	for i := range 10 {
		c.put(idemkeys.Ref{Key: string(rune('a' + i))}, cachedReplay{resp: idemkeys.Response{Status: http.StatusPaymentRequired}, expires: t0.Add(time.Hour)})
	}
	if len(c.entries) > 10 {
		t.Fatalf("cache holds %d entries, bound 10", len(c.entries))
	}
	if _, ok := newReplayCache(0, time.Hour).get(ref, t0); ok {
		t.Fatal("a disabled cache answered")
	}
}

func TestPacerLetsABurstThroughThenSpacesReplays(t *testing.T) {
	p := &pacer{tat: map[idemkeys.Ref]time.Time{}}
	hot, cold := idemkeys.Ref{Key: "hot"}, idemkeys.Ref{Key: "cold"}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// GCRA lets the burst plus the one replay whose slot is due right now through.
	for i := range replayBurst + 1 {
		if d := p.reserve(hot, now); d > 0 {
			t.Fatalf("replay %d of the burst delayed %s", i+1, d)
		}
	}
	if d := p.reserve(hot, now); d != replaySpacing {
		t.Fatalf("first replay past the burst delayed %s, want %s", d, replaySpacing)
	}
	if d := p.reserve(hot, now); d != 2*replaySpacing {
		t.Fatalf("second replay past the burst delayed %s, want %s", d, 2*replaySpacing)
	}
	if d := p.reserve(cold, now); d > 0 {
		t.Fatalf("another key was delayed %s", d)
	}
	if d := p.reserve(hot, now.Add(2*time.Second)); d > 0 {
		t.Fatalf("a key quiet for 2 s was still delayed %s", d)
	}
}
