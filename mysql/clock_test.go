package mysql_test

import (
	"strings"
	"testing"
	"time"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

// The guard takes a replica whose clock strays from the database's out of
// service, and back in once it agrees again.
func TestClockGuard(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	ctx := t.Context()
	offset := 150 * time.Second
	var seen []time.Duration
	g := mysql.NewClockGuard(dbx, time.Second, func() time.Time { return time.Now().Add(-offset) },
		func(d time.Duration) { seen = append(seen, d) }, nil)
	if g.Err() == nil {
		t.Fatal("an unchecked guard lets payments through")
	}
	if err := g.Check(ctx); err != nil {
		t.Fatal(err)
	}
	err := g.Err()
	if err == nil || !strings.Contains(err.Error(), "off the database's") {
		t.Fatalf("150 s behind: %v", err)
	}
	if len(seen) != 1 || seen[0] > -149*time.Second || seen[0] < -151*time.Second {
		t.Fatalf("observed skew %v, want about -150s", seen)
	}
	offset = 0
	if err := g.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Err(); err != nil {
		t.Fatalf("clocks agree again: %v", err)
	}
	offset = -3 * time.Second // ahead this time
	_ = g.Check(ctx)
	if g.Err() == nil {
		t.Fatal("3 s ahead passed a 1 s bound")
	}
}
