package api

import "testing"

// The default connection cap leaves the database pool and a reserve their
// descriptors, within bounds.
func TestDefaultConnectionCap(t *testing.T) {
	for _, tc := range []struct{ limit, pool, want int }{
		{1024, 32, 1024 - 32 - descriptorReserve},
		{256, 32, 256 - 32 - descriptorReserve},
		{100, 32, minConns},
		{1 << 20, 32, maxConns},
		{0, 32, fallbackConns},
	} {
		if got := maxConnsFor(tc.limit, tc.pool); got != tc.want {
			t.Errorf("limit %d, pool %d: cap %d, want %d", tc.limit, tc.pool, got, tc.want)
		}
	}
	if got := DefaultMaxConns(32); got < minConns || got > maxConns {
		t.Errorf("this process's cap %d", got)
	}
}
