package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// A body that could mean two things is refused with a 400 naming what is
// wrong, and stores nothing: a key said twice (the last would win), a known
// field in another case, invalid UTF-8 and escaped lone surrogates (both
// would become U+FFFD, so different bytes would share a fingerprint).
func TestBodiesThatMeanTwoThingsAreRefused(t *testing.T) {
	e := newEnv(t)
	base := `{"amount": 999, "currency": "KRW", "payment_method": "pm_card_ok", "description": "Order \ufffd", "metadata": {"a": "b"}}`
	first := e.post("k", base)
	wantStatus(t, first, http.StatusCreated)
	before := e.counts()

	cases := []struct{ name, body, names string }{
		{"duplicate key", strings.Replace(base, `"amount": 999`, `"amount": 1, "amount": 999`, 1), `"amount"`},
		{"case variant of a known field", strings.Replace(base, `"amount": 999`, `"amount": 1, "Amount": 999`, 1), `"Amount"`},
		{"known field in another case", strings.Replace(base, `"amount"`, `"AMOUNT"`, 1), `case-sensitive`},
		{"duplicate metadata key", strings.Replace(base, `{"a": "b"}`, `{"a": "b", "a": "c"}`, 1), `metadata.a`},
		{"invalid UTF-8", strings.Replace(base, `\ufffd`, "\xff", 1), `UTF-8`},
		{"lone surrogate", strings.Replace(base, `\ufffd`, `\ud800`, 1), `surrogate`},
		{"lone low surrogate", strings.Replace(base, `\ufffd`, `\udc00x`, 1), `surrogate`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Under the key whose stored request it would otherwise replay, and under a new one.
			for _, key := range []string{"k", "fresh-" + tc.name} {
				res := e.post(key, tc.body)
				wantProblem(t, res, http.StatusBadRequest, "invalid-request")
				if !strings.Contains(string(res.body), tc.names) {
					t.Fatalf("problem %s does not name %s", res.body, tc.names)
				}
			}
		})
	}
	if got := e.counts(); got != before {
		t.Fatalf("refused bodies changed state: %+v → %+v", before, got)
	}
	// A surrogate pair is a character, and metadata keys differing in case are two keys.
	ok := strings.Replace(strings.Replace(base, `\ufffd`, `\ud83d\ude00`, 1), `{"a": "b"}`, `{"a": "b", "A": "c"}`, 1)
	wantStatus(t, e.post("pair", ok), http.StatusCreated)
}
