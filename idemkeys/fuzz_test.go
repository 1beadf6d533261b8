package idemkeys_test

import (
	"testing"

	"gateway/idemkeys"
)

// FuzzValidateKey: a key is accepted exactly when it is 1–255 bytes of
// visible ASCII.
func FuzzValidateKey(f *testing.F) {
	for _, k := range []string{"a", "ABC", "550e8400-e29b-41d4-a716-446655440000", "", " ", "a b", "é", "\x7f", "k\n"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := len(key) >= 1 && len(key) <= idemkeys.MaxKeyLen
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				want = false
			}
		}
		if got := idemkeys.ValidateKey(key) == nil; got != want {
			t.Fatalf("ValidateKey(%q) accepted=%v, want %v", key, got, want)
		}
	})
}

// FuzzFingerprint: two field lists hash alike only when they are equal.
func FuzzFingerprint(f *testing.F) {
	f.Add("ab", "c", "a", "bc")
	f.Add("", "x", "x", "")
	f.Add("1000", "KRW", "1000", "KRW")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		same := idemkeys.Fingerprint(a, b) == idemkeys.Fingerprint(c, d)
		if same != (a == c && b == d) {
			t.Fatalf("Fingerprint(%q,%q) vs (%q,%q): equal=%v", a, b, c, d, same)
		}
		if idemkeys.Fingerprint(a, b) != idemkeys.Fingerprint(a, b) {
			t.Fatal("not deterministic")
		}
	})
}
