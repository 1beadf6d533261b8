package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/mysql/localdb"
)

// clusterChaos runs the faults of a Galera cluster (a node SIGKILLed and
// restarted, a node cut off from the others and healed), one at a time, and
// keeps the evidence: when each node was outside the primary component,
// what writes it accepted meanwhile, its certification conflicts.
type clusterChaos struct {
	e   *env
	c   *localdb.Cluster
	mon *monitor

	busy    sync.Mutex // one node fault at a time: two would cost the quorum
	skipped atomic.Int64

	mu     sync.Mutex
	events []*nodeEvent
	probes []probeWrite
	// readyz counts the /readyz answers of replicas on an isolated node,
	// asked while the node said it was outside the primary component.
	readyz map[string]int64
}

// nodeEvent is one node fault and how the cluster took it.
type nodeEvent struct {
	Kind  string    `json:"kind"` // node-kill or node-isolate
	Node  int       `json:"node"`
	Began time.Time `json:"began"`
	Ended time.Time `json:"ended"` // when the node was restarted or healed
	// Kill: until a survivor reports a primary component without the node
	// (writes on the survivors wait until then). Isolate: until the node
	// itself reports it is outside the primary component.
	Detected time.Duration `json:"detected_ns"`
	// From the restart or the heal until every node is Synced again.
	Synced time.Duration `json:"synced_ns"`
	// From the restart or the heal until a replica on the node answered a
	// fresh payment again (filled in after the run; 0 when none did).
	GatewayBack time.Duration `json:"gateway_back_ns"`
	Err         string        `json:"error,omitempty"`
	seq         int           // names its probe writes
}

// probeWrite is one write sent straight to an isolated node.
type probeWrite struct {
	ID     string
	Node   int
	OK     bool
	Code   int // MySQL error number; -1 for another error (timeout, lost connection)
	Before string
	After  string // wsrep_cluster_status read right before and after the write
}

// probeTable holds the probe writes; it lives in the run's database.
const probeTable = "CREATE TABLE chaos_probe (id VARCHAR(64) CHARACTER SET ascii NOT NULL PRIMARY KEY, node INT NOT NULL, at DATETIME(6) NOT NULL)"

// startCluster starts a private Galera cluster and the run's database on it.
func (e *env) startCluster(ctx context.Context) error {
	e.say("starting a %d-node Galera cluster", e.opts.nodes)
	began := time.Now()
	c, err := localdb.StartCluster(ctx, localdb.ClusterOptions{Nodes: e.opts.nodes})
	if err != nil {
		return err
	}
	e.stopDB = c.Stop
	e.say("cluster %s synced after %s", c.Name(), time.Since(began).Round(100*time.Millisecond))
	if err := e.createDatabase(ctx, c.Node(0).DSN(""), false); err != nil {
		return err
	}
	if _, err := e.db.ExecContext(ctx, probeTable); err != nil {
		return fmt.Errorf("create the probe table: %w", err)
	}
	e.cc = &clusterChaos{e: e, c: c, mon: newMonitor(c)}
	return nil
}

// nodeOf is the node replica i talks to.
func (e *env) nodeOf(i int) int { return i % len(e.cc.c.Nodes()) }

// apply runs one node fault; it always leaves the cluster whole again,
// also when ctx (the chaos phase) ends first.
func (cc *clusterChaos) apply(ctx context.Context, ev event) {
	if !cc.busy.TryLock() {
		cc.skipped.Add(1)
		return
	}
	defer cc.busy.Unlock()
	ne := &nodeEvent{Kind: ev.Kind, Node: ev.Target, Began: time.Now()}
	cc.mu.Lock()
	cc.events = append(cc.events, ne)
	ne.seq = len(cc.events)
	cc.mu.Unlock()
	// Restarts and heals must finish after the chaos phase ended.
	bg, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var err error
	switch ev.Kind {
	case "node-kill":
		err = cc.kill(ctx, bg, ev, ne)
	case "node-isolate":
		err = cc.isolate(ctx, bg, ev, ne)
	}
	if err != nil {
		ne.Err = err.Error()
		cc.e.say("%s of node %d: %v", ev.Kind, ev.Target, err)
	}
}

func (cc *clusterChaos) kill(ctx, bg context.Context, ev event, ne *nodeEvent) error {
	n, size := ev.Target, len(cc.c.Nodes())
	if err := cc.c.Kill(n); err != nil {
		return err
	}
	cc.mon.restarted(n)
	cc.e.say("node-kill: node %d SIGKILLed, restarted in %s", n, ev.For.Round(time.Millisecond))
	survivor := cc.c.Node((n + 1) % size)
	detected := make(chan time.Duration, 1)
	go func() {
		err := survivor.Wait(bg, 30*time.Second, "primary without the killed node", func(st localdb.NodeStatus) bool {
			return st.Synced() && st.Size == size-1
		})
		if err != nil {
			detected <- -1
			return
		}
		detected <- time.Since(ne.Began)
	}()
	sleepCtx(ctx, ev.For)
	ne.Detected = <-detected
	ne.Ended = time.Now()
	if err := cc.c.Restart(bg, n); err != nil {
		return err
	}
	if err := cc.c.WaitSynced(bg); err != nil {
		return err
	}
	ne.Synced = time.Since(ne.Ended)
	cc.e.say("node-kill: node %d back and the cluster synced %s after its restart", n, ne.Synced.Round(time.Millisecond))
	return nil
}

func (cc *clusterChaos) isolate(ctx, bg context.Context, ev event, ne *nodeEvent) error {
	n := ev.Target
	node := cc.c.Node(n)
	probeCtx, stopProbe := context.WithCancel(bg)
	probed := make(chan []probeWrite, 1)
	cc.c.Isolate(n)
	cc.e.say("node-isolate: node %d cut off from the others for %s", n, ev.For.Round(time.Millisecond))
	go func() { probed <- cc.probe(probeCtx, n, ne.seq) }()
	if err := node.Wait(bg, 30*time.Second, "outside the primary component", func(st localdb.NodeStatus) bool {
		return st.Component != "Primary"
	}); err == nil {
		ne.Detected = time.Since(ne.Began)
	} else {
		ne.Detected = -1
	}
	sleepCtx(ctx, ev.For)
	ne.Ended = time.Now()
	cc.c.Heal(n)
	stopProbe()
	ps := <-probed
	cc.mu.Lock()
	cc.probes = append(cc.probes, ps...)
	cc.mu.Unlock()
	if err := cc.c.WaitSynced(bg); err != nil {
		return err
	}
	ne.Synced = time.Since(ne.Ended)
	cc.e.say("node-isolate: node %d healed; the cluster synced %s later", n, ne.Synced.Round(time.Millisecond))
	return nil
}

// probe writes to node n directly, ten times a second, until ctx ends,
// reading the node's cluster status around every write.
func (cc *clusterChaos) probe(ctx context.Context, n, event int) []probeWrite {
	node := cc.c.Node(n)
	cfg, err := gomysql.ParseDSN(node.DSN(cc.e.dbName))
	if err != nil {
		return nil
	}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = time.Second, 3*time.Second, 3*time.Second
	// Timeouts on a node cut off are the point; keep the driver quiet about them.
	cfg.Logger = &gomysql.NopLogger{}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil
	}
	pdb := sql.OpenDB(conn)
	pdb.SetMaxOpenConns(1)
	defer pdb.Close()
	var out []probeWrite
	status := func() string {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := node.Status(sctx)
		if err != nil {
			return "unknown"
		}
		return st.Component
	}
	for k := 0; ctx.Err() == nil; k++ {
		p := probeWrite{ID: fmt.Sprintf("e%d-n%d-%04d", event, n, k), Node: n, Before: status()}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := pdb.ExecContext(wctx, "INSERT INTO chaos_probe (id, node, at) VALUES (?, ?, NOW(6))", p.ID, n)
		cancel()
		if ctx.Err() != nil && err != nil {
			break // cut short by the heal: not evidence either way
		}
		p.OK, p.Code = err == nil, -1
		var me *gomysql.MySQLError
		if errors.As(err, &me) {
			p.Code = int(me.Number)
		}
		p.After = status()
		out = append(out, p)
		if p.Before != "Primary" && p.Before != "unknown" && p.After != "Primary" && p.After != "unknown" {
			cc.askReady(ctx, n)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return out
}

// askReady asks the replicas on node n whether they are ready.
func (cc *clusterChaos) askReady(ctx context.Context, n int) {
	client := &http.Client{Timeout: 2 * time.Second}
	for i, r := range cc.e.replicas {
		if cc.e.nodeOf(i) != n || r.running() == nil {
			continue
		}
		label := "no answer"
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url()+"/readyz", nil)
		if res, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			label = strconv.Itoa(res.StatusCode)
		} else if ctx.Err() != nil {
			return
		}
		cc.mu.Lock()
		if cc.readyz == nil {
			cc.readyz = map[string]int64{}
		}
		cc.readyz[label]++
		cc.mu.Unlock()
	}
}

// restore ends every node fault: heals, restarts what is down, and waits
// until the whole cluster is synced.
func (cc *clusterChaos) restore(ctx context.Context) error {
	cc.busy.Lock()
	defer cc.busy.Unlock()
	for i, n := range cc.c.Nodes() {
		if cc.c.Isolated(i) {
			cc.c.Heal(i)
		}
		if !n.Running() {
			if err := cc.c.Restart(ctx, i); err != nil {
				return err
			}
		}
	}
	return cc.c.WaitSynced(ctx)
}

// monitor polls every node's status, recording when each was seen outside
// the primary component and adding up its certification conflicts.
type monitor struct {
	c *localdb.Cluster

	mu       sync.Mutex
	windows  [][]window // per node
	open     []int      // index of the node's open window in windows, or -1
	cert, bf []int64    // totals
	last     [][2]int64 // the counters at the last poll of the node's current process
}

// window is a span in which every poll of a node found it outside the
// primary component.
type window struct{ From, To time.Time }

func newMonitor(c *localdb.Cluster) *monitor {
	n := len(c.Nodes())
	m := &monitor{c: c, windows: make([][]window, n), open: make([]int, n),
		cert: make([]int64, n), bf: make([]int64, n), last: make([][2]int64, n)}
	for i := range m.open {
		m.open[i] = -1
	}
	return m
}

func (m *monitor) run(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		m.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *monitor) poll(ctx context.Context) {
	for i, n := range m.c.Nodes() {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := n.Status(qctx)
		cancel()
		now := time.Now()
		m.mu.Lock()
		switch {
		case err != nil:
			m.open[i] = -1 // down or unreachable: no evidence either way
		case st.Component != "Primary":
			if m.open[i] < 0 {
				m.windows[i] = append(m.windows[i], window{now, now})
				m.open[i] = len(m.windows[i]) - 1
			} else {
				m.windows[i][m.open[i]].To = now
			}
		default:
			m.open[i] = -1
		}
		if err == nil {
			m.cert[i] += max(0, st.CertFailures-m.last[i][0])
			m.bf[i] += max(0, st.BFAborts-m.last[i][1])
			m.last[i] = [2]int64{st.CertFailures, st.BFAborts}
		}
		m.mu.Unlock()
	}
}

// restarted tells the monitor that node i's counters start again from 0.
func (m *monitor) restarted(i int) {
	m.mu.Lock()
	m.last[i] = [2]int64{}
	m.mu.Unlock()
}

// outside reports whether node i was seen outside the primary component
// at both ends of [from, to], with no poll in between seeing otherwise.
func (m *monitor) outside(i int, from, to time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.windows[i] {
		if !from.Before(w.From) && !to.After(w.To) {
			return true
		}
	}
	return false
}

// checkPrimaryOnly is invariant 7: no write accepted by a node outside the
// primary component. Three kinds of evidence:
//   - probe writes sent straight to an isolated node: one acknowledged
//     while the node said it was outside the primary component, right
//     before and right after the write, is a violation;
//   - every acknowledged probe write must exist on the healed cluster (a
//     write a partitioned node accepted would vanish when it rejoins);
//   - a fresh (not replayed) final answer from a replica whose node was
//     outside the primary component for the request's whole life: the
//     gateway cannot have stored it, as every statement there fails.
func (c *checker) checkPrimaryOnly(ctx context.Context) (*invariant, error) {
	inv := &invariant{ID: 7, Name: "no write accepted outside the primary component"}
	cc := c.e.cc
	var stored []string
	if err := c.e.db.SelectContext(ctx, &stored, "SELECT id FROM chaos_probe"); err != nil {
		return nil, fmt.Errorf("read probe writes: %w", err)
	}
	have := map[string]bool{}
	for _, id := range stored {
		have[id] = true
	}
	cc.mu.Lock()
	probes := append([]probeWrite(nil), cc.probes...)
	cc.mu.Unlock()
	unknownStored := 0
	for _, p := range probes {
		outside := p.Before != "Primary" && p.Before != "unknown" && p.After != "Primary" && p.After != "unknown"
		if outside {
			inv.Checked++
			if p.OK {
				inv.fail("node %d acknowledged probe write %s while outside the primary component (%s before, %s after)", p.Node, p.ID, p.Before, p.After)
			}
		}
		if p.OK {
			inv.Checked++
			if !have[p.ID] {
				inv.fail("probe write %s, acknowledged by node %d, is missing from the healed cluster", p.ID, p.Node)
			}
		} else if have[p.ID] {
			unknownStored++
		}
	}
	if unknownStored > 0 {
		inv.Notes = append(inv.Notes, fmt.Sprintf("%d probe writes answered with an error were committed all the same (unknown outcomes, as a lost COMMIT acknowledgement)", unknownStored))
	}
	for _, t := range c.w.traced() {
		if !cc.mon.outside(c.e.nodeOf(t.Replica), t.Sent, t.Got) {
			continue
		}
		inv.Checked++
		if final(t.Status) && !t.Replayed {
			inv.fail("replica %d answered a fresh %d at %s while its node %d was outside the primary component for the whole request",
				t.Replica, t.Status, t.Got.Format("15:04:05.000"), c.e.nodeOf(t.Replica))
		}
	}
	return inv, nil
}

// clusterReport is what a cluster run adds to the report.
type clusterReport struct {
	Nodes        int          `json:"nodes"`
	ReplicaNodes []int        `json:"replica_nodes"`
	Events       []*nodeEvent `json:"events"`
	Skipped      int64        `json:"node_faults_skipped"`

	KillDetected   spread `json:"kill_survivors_primary_after"`
	KillSynced     spread `json:"kill_restart_to_synced"`
	IsolateOutside spread `json:"isolate_node_outside_after"`
	HealSynced     spread `json:"heal_to_synced"`
	GatewayBack    spread `json:"gateway_back_after"`

	CertFailures map[string]int64            `json:"cert_failures_by_node"`
	BFAborts     map[string]int64            `json:"bf_aborts_by_node"`
	Errors       map[string]map[string]int64 `json:"mysql_errors_by_node"`
	Fenced       map[string]int64            `json:"fenced_writes"`
	Internal     []string                    `json:"internal_errors,omitempty"`
	Payments     int                         `json:"payments"`
	// Per 1,000 payments.
	ConflictsPer1000 float64 `json:"cert_conflicts_per_1000"`
	DeadlocksPer1000 float64 `json:"errors_1213_per_1000"`
	FencedPer1000    float64 `json:"fenced_per_1000"`

	OutsideAnswers map[string]int64 `json:"answers_while_node_outside_primary"`
	Probes         map[string]int64 `json:"probe_writes"`
	// Readyz: what /readyz of the replicas on a node outside the primary
	// component answered (200 means a load balancer keeps sending them work).
	Readyz map[string]int64 `json:"readyz_while_node_outside_primary"`
}

// spread summarises durations.
type spread struct {
	N      int    `json:"n"`
	Min    string `json:"min,omitempty"`
	Median string `json:"median,omitempty"`
	Max    string `json:"max,omitempty"`
}

func spreadOf(ds []time.Duration) spread {
	if len(ds) == 0 {
		return spread{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return spread{N: len(ds), Min: r(ds[0]), Median: r(ds[len(ds)/2]), Max: r(ds[len(ds)-1])}
}

func (s spread) String() string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("min %s, median %s, max %s (%d)", s.Min, s.Median, s.Max, s.N)
}

// clusterFigures gathers the cluster's part of the report after the run.
func (e *env) clusterFigures(w *workload, payments int) *clusterReport {
	cc := e.cc
	n := len(cc.c.Nodes())
	cr := &clusterReport{Nodes: n, Skipped: cc.skipped.Load(), Payments: payments,
		CertFailures: map[string]int64{}, BFAborts: map[string]int64{}, Errors: map[string]map[string]int64{},
		OutsideAnswers: map[string]int64{}, Probes: map[string]int64{}}
	for i := range e.replicas {
		cr.ReplicaNodes = append(cr.ReplicaNodes, e.nodeOf(i))
	}
	traces := w.traced()
	cc.mu.Lock()
	cr.Events = cc.events
	// Durations by kind of event and what was measured; 0 or less: not seen.
	durations := map[string][]time.Duration{}
	add := func(key string, d time.Duration) {
		if d > 0 {
			durations[key] = append(durations[key], d)
		}
	}
	for _, ev := range cc.events {
		ev.GatewayBack = firstFresh(traces, e, ev)
		add("back", ev.GatewayBack)
		add(ev.Kind+" detected", ev.Detected)
		add(ev.Kind+" synced", ev.Synced)
	}
	for _, p := range cc.probes {
		switch {
		case p.OK:
			cr.Probes["acknowledged"]++
		case p.Code == 1047:
			cr.Probes["refused 1047"]++
		case p.Code > 0:
			cr.Probes[fmt.Sprintf("refused %d", p.Code)]++
		default:
			cr.Probes["no answer"]++
		}
	}
	cr.Readyz = map[string]int64{}
	for k, v := range cc.readyz {
		cr.Readyz[k] = v
	}
	cc.mu.Unlock()
	cr.KillDetected, cr.KillSynced = spreadOf(durations["node-kill detected"]), spreadOf(durations["node-kill synced"])
	cr.IsolateOutside, cr.HealSynced = spreadOf(durations["node-isolate detected"]), spreadOf(durations["node-isolate synced"])
	cr.GatewayBack = spreadOf(durations["back"])

	var conflicts, deadlocks int64
	cc.mon.mu.Lock()
	for i := range n {
		name := fmt.Sprintf("node%d", i)
		cr.CertFailures[name], cr.BFAborts[name] = cc.mon.cert[i], cc.mon.bf[i]
		conflicts += cc.mon.cert[i] + cc.mon.bf[i]
	}
	cc.mon.mu.Unlock()
	for i, p := range e.dbProxies {
		name := fmt.Sprintf("node%d", e.nodeOf(i))
		if cr.Errors[name] == nil {
			cr.Errors[name] = map[string]int64{}
		}
		for code, k := range p.mysqlErrors() {
			cr.Errors[name][fmt.Sprint(code)] += k
			if code == 1213 {
				deadlocks += k
			}
		}
	}
	for _, t := range traces {
		if cc.mon.outside(e.nodeOf(t.Replica), t.Sent, t.Got) {
			label := fmt.Sprint(t.Status)
			if t.Status == 0 {
				label = "network error"
			} else if t.Replayed {
				label += " replayed"
			}
			cr.OutsideAnswers[label]++
		}
	}
	logs := scanReplicaLogs(e.replicas)
	cr.Fenced = logs.fenced
	cr.Internal = logs.internalSummary()
	var fenced int64
	for _, v := range logs.fenced {
		fenced += v
	}
	if payments > 0 {
		per := func(x int64) float64 { return float64(x) * 1000 / float64(payments) }
		cr.ConflictsPer1000, cr.DeadlocksPer1000, cr.FencedPer1000 = per(conflicts), per(deadlocks), per(fenced)
	}
	return cr
}

// firstFresh is how long after a node fault ended a replica on that node
// first answered a fresh payment; 0 when none did.
func firstFresh(traces []traced, e *env, ev *nodeEvent) time.Duration {
	if ev.Ended.IsZero() {
		return 0
	}
	var best time.Duration
	for _, t := range traces {
		if e.nodeOf(t.Replica) != ev.Node || t.Sent.Before(ev.Ended) || !final(t.Status) || t.Replayed {
			continue
		}
		if d := t.Got.Sub(ev.Ended); best == 0 || d < best {
			best = d
		}
	}
	return best
}

// printCluster adds the cluster's figures to the printed report.
func (cr *clusterReport) print(line func(label, format string, args ...any)) {
	line("cluster", "%d nodes; replicas on nodes %v", cr.Nodes, cr.ReplicaNodes)
	kinds := map[string]int{}
	for _, ev := range cr.Events {
		kinds[ev.Kind]++
	}
	line("node faults", "%s; skipped (another in progress) %d", kv(kinds), cr.Skipped)
	for _, ev := range cr.Events {
		s := fmt.Sprintf("%s node %d at %s: detected after %s, synced %s after the %s",
			ev.Kind, ev.Node, ev.Began.Format("15:04:05"), dur(ev.Detected), dur(ev.Synced), map[string]string{"node-kill": "restart", "node-isolate": "heal"}[ev.Kind])
		if ev.GatewayBack > 0 {
			s += fmt.Sprintf(", fresh payments through it %s after", dur(ev.GatewayBack))
		}
		if ev.Err != "" {
			s += "; ERROR " + ev.Err
		}
		line("  event", "%s", s)
	}
	line("kill: survivors primary after", "%s", cr.KillDetected)
	line("kill: restart to all synced", "%s", cr.KillSynced)
	line("isolate: node non-primary after", "%s", cr.IsolateOutside)
	line("heal: to all synced", "%s", cr.HealSynced)
	line("gateway: fresh payment on the node after", "%s", cr.GatewayBack)
	line("certification conflicts (wsrep)", "cert failures %s; BF aborts %s; %.1f per 1,000 payments", kv(cr.CertFailures), kv(cr.BFAborts), cr.ConflictsPer1000)
	for _, name := range sortedKeys(cr.Errors) {
		line("MySQL errors to replicas on "+name, "%s", kv(cr.Errors[name]))
	}
	line("1213 errors", "%.1f per 1,000 payments", cr.DeadlocksPer1000)
	line("fenced writes (replica logs)", "%s; %.1f per 1,000 payments", kv(cr.Fenced), cr.FencedPer1000)
	line("answers while the node was outside", "%s", kv(cr.OutsideAnswers))
	line("probe writes on isolated nodes", "%s", kv(cr.Probes))
	line("/readyz of their replicas meanwhile", "%s", kv(cr.Readyz))
	for _, s := range cr.Internal {
		line("internal errors (replica logs)", "%s", s)
	}
}

func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "never"
	case d == 0:
		return "-"
	}
	return d.Round(10 * time.Millisecond).String()
}

// openCausal opens a pool on the cluster that waits, before every read,
// until its node has applied everything committed before it.
func openCausal(ctx context.Context, dsn string) (*sqlx.DB, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["wsrep_sync_wait"] = "1"
	return mysql.Open(ctx, cfg.FormatDSN(), mysql.PoolOptions{MaxOpen: 8, MaxIdle: 8})
}
