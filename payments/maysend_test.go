package payments_test

import (
	"testing"
	"time"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

// MaySendAgain is the one decision that can send a second charge for an
// order id: every branch is pinned here.
func TestMaySendAgain(t *testing.T) {
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	local := time.Now()
	const pspTimeout = 10 * time.Second
	const window = 2 * time.Minute
	// rec builds a record read `age` after the payment was created, with the
	// last charge window ending at created+mayCharge (zero: unknown).
	rec := func(age time.Duration, mayCharge time.Duration, known bool) idemkeys.Record {
		r := idemkeys.Record{DBNow: created.Add(age), ReadAt: local}
		if known {
			r.MaySendUntil = created.Add(mayCharge)
		}
		return r
	}
	p := payments.Payment{CreatedAt: created}
	caps := func(dedupe bool, dedupeWindow time.Duration, authoritative bool) psp.Capabilities {
		return psp.Capabilities{DedupesOrderID: dedupe, DedupeWindow: dedupeWindow, AuthoritativeLookup: authoritative, CreationWindow: window}
	}
	tests := []struct {
		name  string
		rec   idemkeys.Record
		caps  psp.Capabilities
		later time.Duration // local time passed since the read
		want  bool
	}{
		{"dedupes for ever", rec(48*time.Hour, 30*time.Second, true), caps(true, 0, false), 0, true},
		{"inside the dedupe window", rec(time.Hour, 30*time.Second, true), caps(true, 24*time.Hour, false), 0, true},
		{"dedupe window ends before the send could", rec(24*time.Hour-5*time.Second, 30*time.Second, true), caps(true, 24*time.Hour, false), 0, false},
		{"the send could leave in time but land after the dedupe window", rec(24*time.Hour-pspTimeout-window+time.Second, 30*time.Second, true), caps(true, 24*time.Hour, false), 0, false},
		{"the send lands before the dedupe window ends", rec(24*time.Hour-pspTimeout-window-time.Second, 30*time.Second, true), caps(true, 24*time.Hour, false), 0, true},
		{"dedupe window ended while we looked", rec(24*time.Hour-time.Minute, 30*time.Second, true), caps(true, 24*time.Hour, false), time.Minute, false},
		{"past the dedupe window, authoritative, creation window over", rec(25*time.Hour, 30*time.Second, true), caps(true, 24*time.Hour, true), 0, true},
		{"past the dedupe window, not authoritative", rec(25*time.Hour, 30*time.Second, true), caps(true, 24*time.Hour, false), 0, false},
		{"no dedupe, authoritative, creation window over", rec(30*time.Second+window+time.Second, 30*time.Second, true), caps(false, 0, true), 0, true},
		{"no dedupe, authoritative, creation window open", rec(30*time.Second+window-time.Second, 30*time.Second, true), caps(false, 0, true), 0, false},
		{"no dedupe, authoritative, window ends exactly now", rec(30*time.Second+window, 30*time.Second, true), caps(false, 0, true), 0, false},
		{"no dedupe, authoritative, charge window unknown", rec(48*time.Hour, 0, false), caps(false, 0, true), 0, false},
		{"no dedupe, not authoritative", rec(48*time.Hour, 30*time.Second, true), caps(false, 0, false), 0, false},
		// Local time passing after the read never makes "the creation window is over" true.
		{"creation window judged as read, not later", rec(30*time.Second+window-time.Second, 30*time.Second, true), caps(false, 0, true), time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := payments.MaySendAgain(tt.rec, p.CreatedAt, tt.caps, pspTimeout, local.Add(tt.later)); got != tt.want {
				t.Errorf("MaySendAgain = %v, want %v", got, tt.want)
			}
		})
	}
}

// ArmGuardFor carries MaySendAgain's decision into ArmCharge, which judges
// it again on the database's clock as the send is armed.
func TestArmGuardFor(t *testing.T) {
	const pspTimeout = 10 * time.Second
	const window = 2 * time.Minute
	tests := []struct {
		name string
		caps psp.Capabilities
		want payments.ArmGuard
	}{
		{"dedupes for ever", psp.Capabilities{DedupesOrderID: true, AuthoritativeLookup: true, CreationWindow: window},
			payments.ArmGuard{Forever: true, Authoritative: true, LateAfter: window}},
		{"dedupe window less the send's time", psp.Capabilities{DedupesOrderID: true, DedupeWindow: 24 * time.Hour, CreationWindow: window},
			payments.ArmGuard{DedupeAge: 24*time.Hour - pspTimeout - window, LateAfter: window}},
		{"dedupe window shorter than a send", psp.Capabilities{DedupesOrderID: true, DedupeWindow: pspTimeout, CreationWindow: window},
			payments.ArmGuard{LateAfter: window}},
		{"no dedupe, authoritative", psp.Capabilities{AuthoritativeLookup: true, CreationWindow: window},
			payments.ArmGuard{Authoritative: true, LateAfter: window}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := payments.ArmGuardFor(tt.caps, pspTimeout); got != tt.want {
				t.Errorf("ArmGuardFor = %+v, want %+v", got, tt.want)
			}
		})
	}
}
