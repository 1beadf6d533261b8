package idemkeys_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/idemkeys"
)

func TestValidateKeyAccepts(t *testing.T) {
	tests := []struct {
		name string
		key  string
	}{
		{"one char", "a"},
		{"max length", strings.Repeat("k", idemkeys.MaxKeyLen)},
		{"uuid", "3f2b8c1e-5d7a-4e0b-9c6f-1a2b3c4d5e6f"},
		{"lowest visible", "!"},
		{"highest visible", "~"},
		{"all visible ascii", allVisibleASCII()},
		{"punctuation", `!"#$%&'()*+,-./:;<=>?@[\]^_{|}~` + "`"},
		{"mixed case", "AbC-xYz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := idemkeys.ValidateKey(tt.key); err != nil {
				t.Errorf("ValidateKey(%q) = %v, want nil", tt.key, err)
			}
		})
	}
}

func TestValidateKeyRefuses(t *testing.T) {
	tests := []struct {
		name string
		key  string
	}{
		{"empty", ""},
		{"one over max", strings.Repeat("k", idemkeys.MaxKeyLen+1)},
		{"far over max", strings.Repeat("k", 10*idemkeys.MaxKeyLen)},
		{"del", "abc\x7f"},
		{"latin-1 byte", "abc\xe9"},
		{"utf-8 e acute", "café"},
		{"utf-8 emoji", "key-🔑"},
		{"byte 0x80", "\x80"},
		{"byte 0xff", "\xff"},
		{"control at start", "\nabc"},
		{"control in middle", "ab\tc"},
		{"space in middle", "ab c"},
		{"255 chars with a space", strings.Repeat("k", idemkeys.MaxKeyLen-1) + " "},
	}
	for c := 0; c <= 0x20; c++ {
		tests = append(tests, struct {
			name string
			key  string
		}{fmt.Sprintf("control 0x%02x", c), "abc" + string(rune(c)) + "def"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustInvalidKey(t, idemkeys.ValidateKey(tt.key))
		})
	}
}

func TestValidateKeyRefusesEveryByteOutsideVisibleASCII(t *testing.T) {
	for b := 0; b < 256; b++ {
		key := "k" + string([]byte{byte(b)})
		err := idemkeys.ValidateKey(key)
		visible := b >= 0x21 && b <= 0x7e
		switch {
		case visible && err != nil:
			t.Errorf("byte 0x%02x: ValidateKey = %v, want nil", b, err)
		case !visible && err == nil:
			t.Errorf("byte 0x%02x: ValidateKey = nil, want an error", b)
		}
	}
}

func TestValidateKeyErrorSaysWhy(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want string
	}{
		{"empty", "", "empty"},
		{"too long", strings.Repeat("k", 300), "300"},
		{"bad byte position", "ab\x00", "byte 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := idemkeys.ValidateKey(tt.key)
			e := mustInvalidKey(t, err)
			if !strings.Contains(e.Reason, tt.want) {
				t.Errorf("reason %q does not mention %q", e.Reason, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "invalid Idempotency-Key: ") {
				t.Errorf("Error() = %q, want the invalid Idempotency-Key prefix", err.Error())
			}
		})
	}
}

func mustInvalidKey(tb testing.TB, err error) *idemkeys.InvalidKeyError {
	tb.Helper()
	var e *idemkeys.InvalidKeyError
	if !errors.As(err, &e) {
		tb.Fatalf("error = %v (%T), want *idemkeys.InvalidKeyError", err, err)
	}
	if e.Reason == "" {
		tb.Fatalf("InvalidKeyError has no reason")
	}
	return e
}

func allVisibleASCII() string {
	var b strings.Builder
	for c := byte(0x21); c <= 0x7e; c++ {
		b.WriteByte(c)
	}
	return b.String()
}

func TestFingerprint(t *testing.T) {
	t.Run("stable", func(t *testing.T) {
		a := idemkeys.Fingerprint("v1", "100", "USD", "card")
		b := idemkeys.Fingerprint("v1", "100", "USD", "card")
		if a != b {
			t.Errorf("same fields hash differently: %x vs %x", a, b)
		}
	})
	t.Run("encoding is pinned", func(t *testing.T) {
		// Stored fingerprints must keep matching after a refactor, or every
		// key in flight during a deploy would answer 422: pin the documented
		// encoding, sha256 over (8-byte big-endian length, bytes) per field.
		want := sha256.Sum256([]byte("\x00\x00\x00\x00\x00\x00\x00\x02ab\x00\x00\x00\x00\x00\x00\x00\x00"))
		if got := idemkeys.Fingerprint("ab", ""); got != want {
			t.Errorf("Fingerprint(\"ab\", \"\") = %x, want %x", got, want)
		}
	})

	differ := []struct {
		name string
		a, b []string
	}{
		{"boundary shift", []string{"ab", "c"}, []string{"a", "bc"}},
		{"boundary shift to empty", []string{"abc", ""}, []string{"", "abc"}},
		{"order", []string{"a", "b"}, []string{"b", "a"}},
		{"value", []string{"a", "b"}, []string{"a", "c"}},
		{"case", []string{"usd"}, []string{"USD"}},
		{"extra empty field", []string{"a"}, []string{"a", ""}},
		{"no fields vs one empty field", nil, []string{""}},
		{"two empties vs one", []string{"", ""}, []string{""}},
		{"concatenation", []string{"a", "b"}, []string{"ab"}},
		{"length prefix lookalike", []string{"a", "b"}, []string{"a\x00\x00\x00\x00\x00\x00\x00\x01b"}},
	}
	for _, tt := range differ {
		t.Run("differs/"+tt.name, func(t *testing.T) {
			a, b := idemkeys.Fingerprint(tt.a...), idemkeys.Fingerprint(tt.b...)
			if a == b {
				t.Errorf("Fingerprint(%q) == Fingerprint(%q) = %x", tt.a, tt.b, a)
			}
		})
	}

	t.Run("empty fields are hashed", func(t *testing.T) {
		var zero [32]byte
		for _, fields := range [][]string{nil, {""}, {"", ""}} {
			if got := idemkeys.Fingerprint(fields...); got == zero {
				t.Errorf("Fingerprint(%q) is all zero", fields)
			}
		}
		if idemkeys.Fingerprint() != idemkeys.Fingerprint([]string{}...) {
			t.Errorf("nil and empty field lists hash differently")
		}
	})
}

func TestHasher(t *testing.T) {
	h := idemkeys.NewHasher([]byte("log secret"))
	base := idemkeys.Ref{MerchantID: "mer_1", Endpoint: "POST /payments", Key: "order-7f3a9c-secret"}

	t.Run("stable", func(t *testing.T) {
		if a, b := h.Key(base), h.Key(base); a != b {
			t.Errorf("Hash is not stable: %q vs %q", a, b)
		}
	})
	t.Run("short hex", func(t *testing.T) {
		k := h.Key(base)
		if len(k) != 16 {
			t.Errorf("Key = %q (%d chars), want 16 hex chars", k, len(k))
		}
		if strings.Trim(k, "0123456789abcdef") != "" {
			t.Errorf("Key = %q, want lowercase hex", k)
		}
	})
	t.Run("does not contain the key", func(t *testing.T) {
		// Keys made of hex digits are the ones a careless encoding could leak
		// into a hex hash unnoticed.
		for _, key := range []string{base.Key, "0123456789abcdef", "deadbeefcafe", "c0ffee"} {
			ref := idemkeys.Ref{MerchantID: base.MerchantID, Endpoint: base.Endpoint, Key: key}
			if k := h.Key(ref); strings.Contains(k, key) {
				t.Errorf("Key(%+v) = %q contains the raw key", ref, k)
			}
		}
	})

	differ := []struct {
		name string
		ref  idemkeys.Ref
	}{
		{"merchant", idemkeys.Ref{MerchantID: "mer_2", Endpoint: base.Endpoint, Key: base.Key}},
		{"endpoint", idemkeys.Ref{MerchantID: base.MerchantID, Endpoint: "POST /refunds", Key: base.Key}},
		{"key", idemkeys.Ref{MerchantID: base.MerchantID, Endpoint: base.Endpoint, Key: "order-7f3a9c-secreT"}},
		{"key case", idemkeys.Ref{MerchantID: base.MerchantID, Endpoint: base.Endpoint, Key: strings.ToUpper(base.Key)}},
	}
	for _, tt := range differ {
		t.Run("differs/"+tt.name, func(t *testing.T) {
			if h.Key(tt.ref) == h.Key(base) {
				t.Errorf("Hash(%+v) == Hash(%+v)", tt.ref, base)
			}
		})
	}
	t.Run("differs/field boundary", func(t *testing.T) {
		a := idemkeys.Ref{MerchantID: "mer_1", Endpoint: "ab", Key: "c"}
		b := idemkeys.Ref{MerchantID: "mer_1", Endpoint: "a", Key: "bc"}
		if h.Key(a) == h.Key(b) {
			t.Errorf("Hash(%+v) == Hash(%+v)", a, b)
		}
	})
	t.Run("keyed", func(t *testing.T) {
		// Without the secret, nobody can confirm a guessed key against a log line.
		other := idemkeys.NewHasher([]byte("another secret"))
		if other.Key(base) == h.Key(base) || other.Merchant(base.MerchantID) == h.Merchant(base.MerchantID) {
			t.Error("two secrets name a key alike")
		}
		if idemkeys.NewHasher(nil).Key(base) == idemkeys.NewHasher(nil).Key(base) {
			t.Error("two hashers without a secret share one")
		}
	})
	t.Run("documented recipe", func(t *testing.T) {
		// printf 'M\0POST /payments\0K' | openssl dgst -sha256 -hmac S | cut -c 1-16
		m := hmac.New(sha256.New, []byte("log secret"))
		m.Write([]byte(base.MerchantID + "\x00" + base.Endpoint + "\x00" + base.Key))
		if want := hex.EncodeToString(m.Sum(nil))[:16]; h.Key(base) != want {
			t.Errorf("Key = %s, the recipe of docs/operations.md gives %s", h.Key(base), want)
		}
	})
	t.Run("reused HMACs start clean", func(t *testing.T) {
		// Names come from pooled HMACs, reset between uses and shared by
		// goroutines: each must still be the recipe's.
		recipe := func(ref idemkeys.Ref) string {
			m := hmac.New(sha256.New, []byte("log secret"))
			m.Write([]byte(ref.MerchantID + "\x00" + ref.Endpoint + "\x00" + ref.Key))
			return hex.EncodeToString(m.Sum(nil))[:16]
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					ref := idemkeys.Ref{MerchantID: base.MerchantID, Endpoint: base.Endpoint, Key: fmt.Sprintf("k-%d-%d", g, i)}
					if got, want := h.Key(ref), recipe(ref); got != want {
						t.Errorf("Key(%+v) = %s, want %s", ref, got, want)
						return
					}
					_ = h.Merchant(ref.Key)
				}
			}()
		}
		wg.Wait()
	})
	t.Run("log value", func(t *testing.T) {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", h.Attr(base))
		line := buf.String()
		if !strings.Contains(line, `"key":"`+h.Key(base)+`"`) || !strings.Contains(line, `"merchant":"`+h.Merchant(base.MerchantID)+`"`) {
			t.Errorf("log line %s lacks the hashed key and merchant", line)
		}
		if strings.Contains(line, base.Key) || strings.Contains(line, base.MerchantID) {
			t.Errorf("log line %s names the key or the merchant", line)
		}
	})
}

func TestRecordLeaseActive(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	// The lease is judged on the database's clock as the row was read; the
	// local clock plays no part.
	tests := []struct {
		name string
		rec  idemkeys.Record
		want bool
	}{
		{"in progress, lease ahead", idemkeys.Record{State: idemkeys.InProgress, LockedUntil: now.Add(time.Second)}, true},
		{"in progress, lease a microsecond ahead", idemkeys.Record{State: idemkeys.InProgress, LockedUntil: now.Add(time.Microsecond)}, true},
		{"in progress, lease ends now", idemkeys.Record{State: idemkeys.InProgress, LockedUntil: now}, false},
		{"in progress, lease expired", idemkeys.Record{State: idemkeys.InProgress, LockedUntil: now.Add(-time.Second)}, false},
		{"in progress, lease released (zero)", idemkeys.Record{State: idemkeys.InProgress}, false},
		{"completed, lease time ahead", idemkeys.Record{State: idemkeys.Completed, LockedUntil: now.Add(time.Hour)}, false},
		{"completed, no lease", idemkeys.Record{State: idemkeys.Completed}, false},
		{"unknown state, lease ahead", idemkeys.Record{State: "", LockedUntil: now.Add(time.Hour)}, false},
		{"in progress, lease ahead in another zone", idemkeys.Record{State: idemkeys.InProgress,
			LockedUntil: now.Add(time.Second).In(time.FixedZone("KST", 9*3600))}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rec.DBNow = now
			if got := tt.rec.LeaseActive(); got != tt.want {
				t.Errorf("LeaseActive(%v) with locked_until %v, state %q = %v, want %v",
					now, tt.rec.LockedUntil, tt.rec.State, got, tt.want)
			}
		})
	}
}

func TestToken(t *testing.T) {
	first := idemkeys.FirstToken()
	if first.Grant() != 1 {
		t.Fatalf("first token %x is grant %d", first, first.Grant())
	}
	next := first.Next()
	if next.Grant() != 2 || next == first {
		t.Fatalf("next token %x after %x is grant %d", next, first, next.Grant())
	}
	// A grant lost with a database write is never handed out again: the
	// same grant number made twice differs in its random part.
	seen := map[idemkeys.Token]bool{}
	for range 1000 {
		tok := first.Next()
		if seen[tok] {
			t.Fatalf("token %x handed out twice", tok)
		}
		seen[tok] = true
	}
	if got := idemkeys.Token(5<<32 | 7).NextWith(9); got != 6<<32|9 {
		t.Fatalf("NextWith = %x", got)
	}
}

func TestRecordNothingSent(t *testing.T) {
	tests := []struct {
		name              string
		attempts, notSent int
		want              bool
	}{
		{"claim refused unprocessed", 1, 1, true},
		{"two sends, both refused", 2, 2, true},
		{"two sends, one refused", 2, 1, false},
		{"one send, fate unknown", 1, 0, false},
		{"unknown history", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := idemkeys.Record{SendAttempts: tt.attempts, SendsNotSent: tt.notSent}
			if got := r.NothingSent(); got != tt.want {
				t.Errorf("NothingSent = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRecordDBNowAtMost(t *testing.T) {
	read := time.Now()
	r := idemkeys.Record{DBNow: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ReadAt: read}
	if got := r.DBNowAtMost(read.Add(3 * time.Second)); !got.Equal(r.DBNow.Add(3 * time.Second)) {
		t.Fatalf("DBNowAtMost = %v", got)
	}
}
