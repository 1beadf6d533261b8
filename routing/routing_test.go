package routing_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gateway/psp"
	"gateway/psp/fake"
	"gateway/routing"
)

// Three accounts: a domestic one for KRW up to a limit, a global one for
// the rest, and a backup for everything.
var three = routing.Table{Default: routing.Route{
	{Account: "toss_kr", Currencies: []string{"KRW"}, MaxAmount: 5_000_000},
	{Account: "stripe_global", Currencies: []string{"USD", "EUR", "KRW"}, MinAmount: 100},
	{Account: "fake_backup"},
}}

func TestCandidatesFollowTheRules(t *testing.T) {
	tests := []struct {
		name string
		p    routing.Payment
		want []string
	}{
		{"domestic KRW", routing.Payment{Currency: "KRW", Amount: 10_000}, []string{"toss_kr", "stripe_global", "fake_backup"}},
		{"KRW above the domestic limit", routing.Payment{Currency: "KRW", Amount: 9_000_000}, []string{"stripe_global", "fake_backup"}},
		{"USD", routing.Payment{Currency: "USD", Amount: 2_000}, []string{"stripe_global", "fake_backup"}},
		{"USD below the global minimum", routing.Payment{Currency: "USD", Amount: 50}, []string{"fake_backup"}},
		{"JPY", routing.Payment{Currency: "JPY", Amount: 500}, []string{"fake_backup"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := three.Candidates(tt.p); !slices.Equal(got, tt.want) {
				t.Fatalf("candidates %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPaymentMethodPrefixes(t *testing.T) {
	tb := routing.Table{Default: routing.Route{{Account: "va", PaymentMethods: []string{"pm_virtual_account"}}, {Account: "cards"}}}
	if got := tb.Candidates(routing.Payment{Currency: "KRW", Amount: 1, PaymentMethod: "pm_virtual_account"}); !slices.Equal(got, []string{"va", "cards"}) {
		t.Fatalf("virtual account: %v", got)
	}
	if got := tb.Candidates(routing.Payment{Currency: "KRW", Amount: 1, PaymentMethod: "pm_card_ok"}); !slices.Equal(got, []string{"cards"}) {
		t.Fatalf("card: %v", got)
	}
	// A method given only at the confirm matches no method rule.
	if got := tb.Candidates(routing.Payment{Currency: "KRW", Amount: 1}); !slices.Equal(got, []string{"cards"}) {
		t.Fatalf("no method yet: %v", got)
	}
}

func TestMerchantRoutesOverrideTheDefault(t *testing.T) {
	tb := three
	tb.Merchants = map[string]routing.Route{"mer_b": {{Account: "fake_backup"}}}
	if got := tb.Candidates(routing.Payment{MerchantID: "mer_b", Currency: "KRW", Amount: 10}); !slices.Equal(got, []string{"fake_backup"}) {
		t.Fatalf("merchant's own route: %v", got)
	}
	if got := tb.Candidates(routing.Payment{MerchantID: "mer_a", Currency: "KRW", Amount: 10}); got[0] != "toss_kr" {
		t.Fatalf("default route: %v", got)
	}
}

// The weighted draw is a function of (merchant, key): the same key always
// sees the same order, and over many keys the split follows the weights.
func TestWeightsSplitByKeyDeterministically(t *testing.T) {
	tb := routing.Table{Default: routing.Route{{Account: "a", Weight: 3}, {Account: "b", Weight: 1}, {Account: "c"}}}
	first := map[string]int{}
	for i := range 4000 {
		p := routing.Payment{MerchantID: "mer_1", Key: fmt.Sprintf("key-%d", i), Currency: "KRW", Amount: 10}
		got := tb.Candidates(p)
		for range 3 {
			if again := tb.Candidates(p); !slices.Equal(again, got) {
				t.Fatalf("key %s: %v then %v", p.Key, got, again)
			}
		}
		if len(got) != 3 || got[2] != "c" {
			t.Fatalf("key %s: %v, want the unweighted account last", p.Key, got)
		}
		first[got[0]]++
	}
	// 3:1 of 4000 is 3000:1000; a fair hash stays well within ±150.
	if a := first["a"]; a < 2850 || a > 3150 {
		t.Fatalf("first choices %v, want about 3000 a and 1000 b", first)
	}
}

func TestCheckNamesEveryProblem(t *testing.T) {
	tb := routing.Table{
		Default:   routing.Route{{Account: "nope"}, {Account: "a", Currencies: []string{"krw"}, MinAmount: 10, MaxAmount: 5, Weight: -1}},
		Merchants: map[string]routing.Route{"mer_x": {}},
	}
	errs := tb.Check(map[string]bool{"a": true})
	var all []string
	for _, e := range errs {
		all = append(all, e.Error())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		`routes.default[0].account: names "nope"`,
		`routes.default[1].currencies: "krw"`,
		`routes.default[1]: min_amount and max_amount`,
		`routes.default[1].weight`,
		`routes.merchants.mer_x: a route needs at least one account`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("problems do not name %q:\n%s", want, text)
		}
	}
}

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// A breaker opens on failures past its minimum of calls, refuses new
// payments through its cool-down, lets one probe through after it, and
// closes on the probe's success (or opens again on its failure).
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	b := routing.NewBreaker(routing.BreakerConfig{Window: 10 * time.Second, MinCalls: 4, FailurePercent: 50, Cooldown: 5 * time.Second}, clock.Now)
	b.Record(true, time.Millisecond)
	b.Record(true, time.Millisecond)
	b.Record(true, time.Millisecond)
	if !b.Allow() || b.State() != routing.Closed {
		t.Fatal("open below the minimum of calls")
	}
	b.Record(false, time.Millisecond)
	if b.State() != routing.Open || b.Allow() {
		t.Fatalf("3 failures of 4 calls: %v", b.State())
	}
	clock.now = clock.now.Add(4 * time.Second)
	if b.Allow() {
		t.Fatal("allowed during the cool-down")
	}
	clock.now = clock.now.Add(time.Second)
	if !b.Allow() {
		t.Fatal("no probe after the cool-down")
	}
	if b.Allow() {
		t.Fatal("a second payment while the probe is out")
	}
	b.Record(true, time.Millisecond) // the probe failed
	if b.State() != routing.Open || b.Allow() {
		t.Fatalf("after a failed probe: %v", b.State())
	}
	clock.now = clock.now.Add(5 * time.Second)
	if !b.Allow() {
		t.Fatal("no second probe")
	}
	b.Record(false, time.Millisecond)
	if b.State() != routing.Closed || !b.Allow() || !b.Allow() {
		t.Fatalf("after a good probe: %v", b.State())
	}
}

// Old outcomes leave the window; slow calls count as failures.
func TestBreakerWindowAndSlowCalls(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	b := routing.NewBreaker(routing.BreakerConfig{Window: 10 * time.Second, MinCalls: 4, FailurePercent: 50, Cooldown: 5 * time.Second, Slow: time.Second}, clock.Now)
	for range 3 {
		b.Record(true, time.Millisecond)
	}
	clock.now = clock.now.Add(11 * time.Second)
	b.Record(false, time.Millisecond)
	if b.State() != routing.Closed {
		t.Fatal("failures older than the window counted")
	}
	for range 3 {
		b.Record(false, 2*time.Second)
	}
	if b.State() != routing.Open {
		t.Fatalf("3 slow calls of 4: %v", b.State())
	}
}

// A new payment goes only to an account whose breaker lets it through; a
// next attempt prefers one, and takes any untried account rather than none.
func TestChooseAndNext(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	cfg := routing.BreakerConfig{Window: 10 * time.Second, MinCalls: 1, FailurePercent: 50, Cooldown: time.Minute}
	acc, err := routing.NewAccounts("a", map[string]psp.Adapter{"a": fake.New(), "b": fake.New(), "c": fake.New()})
	if err != nil {
		t.Fatal(err)
	}
	h := routing.NewHealth(acc.Names(), cfg, clock.Now)
	if err := acc.WithRoutes(routing.Table{Default: routing.Route{{Account: "a"}, {Account: "b"}, {Account: "c"}}}, h); err != nil {
		t.Fatal(err)
	}
	h.Record("b", true, time.Millisecond) // b's breaker opens
	cands := []string{"a", "b", "c"}
	if got, _ := acc.Choose(cands, nil); got != "a" {
		t.Fatalf("new payment to %s", got)
	}
	if got, _ := acc.Next(cands, []string{"a"}); got != "c" {
		t.Fatalf("next after a: %s, want the healthy c before the open b", got)
	}
	if got, ok := acc.Choose(cands, []string{"a", "c"}); ok {
		t.Fatalf("a new payment may go to the open b: %s", got)
	}
	if got, ok := acc.Next(cands, []string{"a", "c"}); !ok || got != "b" {
		t.Fatalf("next after a and c: %s %v, want b, open or not", got, ok)
	}
	if _, ok := acc.Next(cands, cands); ok {
		t.Fatal("a next attempt with every account tried")
	}
}
