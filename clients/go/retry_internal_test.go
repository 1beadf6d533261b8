package gateway

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		value string
		want  time.Duration
		ok    bool
	}{
		{"absent", "", 0, false},
		{"zero seconds", "0", 0, true},
		{"seconds", "3", 3 * time.Second, true},
		{"seconds with spaces", " 5 ", 5 * time.Second, true},
		{"negative", "-1", 0, false},
		{"signed", "+5", 0, false},
		{"fraction", "1.5", 0, false},
		{"text", "soon", 0, false},
		{"past a decade", "9999999999", 1 << 62, true},
		{"an HTTP date ahead", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"an HTTP date past", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"an RFC 850 date", "Tuesday, 01-Dec-26 12:00:10 GMT", 10 * time.Second, true},
		{"a malformed date", "Tue, 1 Dec 2026", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := parseRetryAfter(c.value, now)
			if got != c.want || ok != c.ok {
				t.Fatalf("parseRetryAfter(%q) = %v, %v; want %v, %v", c.value, got, ok, c.want, c.ok)
			}
		})
	}
}

// The back-off of retry n is drawn from [0, min(max, base·2^(n-1))):
// the bounds hold at both ends of the draw and past any shift's overflow.
func TestBackoffBounds(t *testing.T) {
	const base, ceiling = 100 * time.Millisecond, 3 * time.Second
	var drawnFrom time.Duration
	c := &Client{base: base, max: ceiling}
	for _, draw := range []struct {
		name string
		pick func(n time.Duration) time.Duration
	}{
		{"lowest", func(time.Duration) time.Duration { return 0 }},
		{"highest", func(n time.Duration) time.Duration { return n - 1 }},
	} {
		t.Run(draw.name, func(t *testing.T) {
			c.jitter = func(n time.Duration) time.Duration { drawnFrom = n; return draw.pick(n) }
			for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
				5: 1600 * time.Millisecond, 6: ceiling, 40: ceiling, 63: ceiling, 64: ceiling, 1000: ceiling} {
				d := c.backoff(n)
				if drawnFrom != want {
					t.Errorf("retry %d: drawn below %v, want below %v", n, drawnFrom, want)
				}
				if d < 0 || d >= want {
					t.Errorf("retry %d: waited %v, outside [0, %v)", n, d, want)
				}
			}
		})
	}
}

func TestProblemCode(t *testing.T) {
	for typ, want := range map[string]Code{
		"/problems/request-in-flight":               CodeRequestInFlight,
		"https://pay.example/problems/rate-limited": CodeRateLimited,
		"about:blank": "about:blank",
		"/problems/":  "",
	} {
		if got := problemCode(typ); got != want {
			t.Errorf("problemCode(%q) = %q, want %q", typ, got, want)
		}
	}
}
