package localdb

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TestGaleraCluster starts a three-node cluster, SIGKILLs a node and brings
// it back (it must catch up on what was written meanwhile), cuts another off
// the group (it must refuse writes as outside the primary component while
// the other two go on) and heals it, then stops everything.
func TestGaleraCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Galera cluster (about a minute): make proofs runs it")
	}
	began := time.Now()
	c, err := StartCluster(t.Context(), ClusterOptions{Log: testWriter{t}, NoInstall: true})
	if errors.Is(err, ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	t.Logf("cluster synced %s after the start", time.Since(began).Round(time.Millisecond))
	dir := c.dir

	db0, db1, db2 := openNode(t, c, 0), openNode(t, c, 1), openNode(t, c, 2)
	mustExec(t, db0, "CREATE DATABASE g")
	mustExec(t, db0, "CREATE TABLE g.t (id INT PRIMARY KEY, node INT NOT NULL)")
	mustExec(t, db1, "INSERT INTO g.t VALUES (1, 1)")
	// Causal reads: node 2 answers only after applying what the cluster
	// committed before the read.
	if n := queryInt(t, db2, "SELECT node FROM g.t WHERE id = 1"); n != 1 {
		t.Fatalf("node2 reads node = %d, want the row written on node1", n)
	}

	t.Run("kill and rejoin", func(t *testing.T) {
		killed := time.Now()
		if err := c.Kill(1); err != nil {
			t.Fatal(err)
		}
		if c.Node(1).Running() {
			t.Fatal("node1 still running after Kill")
		}
		waitFor(t, c.Node(0), "primary with 2 nodes", func(st NodeStatus) bool { return st.Synced() && st.Size == 2 })
		t.Logf("survivors form a primary component of 2 %s after the kill", time.Since(killed).Round(time.Millisecond))
		mustExec(t, db0, "INSERT INTO g.t VALUES (2, 0)") // node1 must catch up on this

		restarted := time.Now()
		if err := c.Restart(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		t.Logf("node1 synced %s after its restart", time.Since(restarted).Round(time.Millisecond))
		if err := c.WaitSynced(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := queryInt(t, db1, "SELECT COUNT(*) FROM g.t"); n != 2 {
			t.Fatalf("node1 holds %d rows after rejoining, want 2", n)
		}
		log, _ := os.ReadFile(c.Node(1).ErrorLog())
		if !strings.Contains(string(log), "IST received") {
			t.Errorf("node1 did not catch up by incremental transfer (no \"IST received\" in its error log)")
		}
	})

	t.Run("partition and heal", func(t *testing.T) {
		cut := time.Now()
		c.Isolate(2)
		if !c.Isolated(2) {
			t.Fatal("Isolated(2) = false after Isolate(2)")
		}
		waitFor(t, c.Node(2), "outside the primary component", func(st NodeStatus) bool { return st.Component == "non-Primary" })
		t.Logf("node2 non-primary %s after the cut", time.Since(cut).Round(time.Millisecond))
		waitFor(t, c.Node(0), "primary with 2 nodes", func(st NodeStatus) bool { return st.Synced() && st.Size == 2 })

		_, err := db2.ExecContext(t.Context(), "INSERT INTO g.t VALUES (3, 2)")
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1047 {
			t.Fatalf("a write on the isolated node: err = %v, want MySQL error 1047 (not prepared: non-primary)", err)
		}
		mustExec(t, db0, "INSERT INTO g.t VALUES (4, 0)")
		// What a readiness or clock check would see there, with and
		// without causal reads.
		plain := openDB(t, c.Node(2).DSN(""))
		for _, q := range []string{"SELECT NOW(6)", "SELECT @@global.read_only", "SELECT COUNT(*) FROM g.t"} {
			for name, pool := range map[string]*sql.DB{"wsrep_sync_wait=1": db2, "wsrep_sync_wait=0": plain} {
				var v string
				began := time.Now()
				err := pool.QueryRowContext(t.Context(), q).Scan(&v)
				t.Logf("on the isolated node, %s with %s: %q, err %v (%s)", q, name, v, err, time.Since(began).Round(time.Millisecond))
			}
		}

		healed := time.Now()
		c.Heal(2)
		if err := c.WaitSynced(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Logf("cluster of 3 synced %s after the heal", time.Since(healed).Round(time.Millisecond))
		if n := queryInt(t, db2, "SELECT COUNT(*) FROM g.t WHERE id = 4"); n != 1 {
			t.Errorf("node2 misses the row written during the partition")
		}
		if n := queryInt(t, db0, "SELECT COUNT(*) FROM g.t WHERE id = 3"); n != 0 {
			t.Errorf("the write refused by the isolated node exists in the cluster")
		}
	})

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir %s left behind: %v", dir, err)
	}
	for _, n := range c.Nodes() {
		if n.Running() || runningWith("--defaults-file="+n.cnf) {
			t.Errorf("%s still running after Stop", n.Name())
		}
	}
}

// openNode opens a pool on node i with causal reads.
func openNode(t *testing.T, c *Cluster, i int) *sql.DB {
	t.Helper()
	return openDB(t, c.Node(i).DSN("")+"?wsrep_sync_wait=1")
}

func waitFor(t *testing.T, n *Node, what string, ok func(NodeStatus) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := n.Wait(ctx, time.Minute, what, ok); err != nil {
		t.Fatal(err)
	}
}
