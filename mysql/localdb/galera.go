package localdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// A private Galera cluster: N mariadbd nodes with the galera-4 provider on
// loopback, each with its own defaults file, data dir and four ports (SQL;
// group communication, reached through a proxy the cluster controls; IST;
// SST). It exists for chaos runs and tests: nodes can be SIGKILLed and
// restarted, and cut off from the others.

// ClusterOptions configure a private cluster.
type ClusterOptions struct {
	Nodes int // 0 means 3
	// Dir is where the cluster's own directory is created (and removed by
	// Stop); "" means os.TempDir(). Started as root, the nodes run as the
	// mysql user, which must be able to reach it.
	Dir string
	Log io.Writer // progress lines for humans; nil = io.Discard
	// Settings are extra server settings for every node, as lines of a
	// defaults file ("innodb_flush_log_at_trx_commit=2").
	Settings []string
	// NoInstall refuses to install missing packages: the error wraps
	// ErrNotInstalled and says what to install (tests use it).
	NoInstall bool
}

// ErrNotInstalled marks a start refused because packages are missing and
// ClusterOptions.NoInstall forbade installing them.
var ErrNotInstalled = errors.New("localdb: packages missing")

// Cluster is a running private cluster. Stop it when done.
type Cluster struct {
	name  string // wsrep_cluster_name
	dir   string
	bins  galeraBinaries
	runAs *syscall.Credential // nil: run as ourselves
	log   io.Writer
	sb    *switchboard
	nodes []*Node

	stopOnce sync.Once
	stopErr  error
}

// Node is one member of a Cluster.
type Node struct {
	c       *Cluster
	index   int
	name    string
	dataDir string
	cnf     string // its defaults file
	ip      string // the address its group communication listens on
	sqlPort int
	gcPort  int // group communication: nodeIP:gcPort, proxied from 127.0.0.1:gcPort
	istPort int
	sstPort int
	proxy   *gcommProxy
	status  *sql.DB

	mu   sync.Mutex
	proc *nodeProc
}

// nodeProc is one run of a node's server process.
type nodeProc struct {
	cmd    *exec.Cmd
	output *tailWriter
	done   chan struct{} // closed once reaped
	err    error         // Wait's result, read after done
}

func (p *nodeProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// NodeStatus is what a node says about itself and its cluster.
type NodeStatus struct {
	State        string // wsrep_local_state_comment: Synced, Joining, Joined, Donor/Desynced, Initialized…
	Component    string // wsrep_cluster_status: Primary, non-Primary or Disconnected
	Size         int    // wsrep_cluster_size
	Ready        bool   // wsrep_ready: the node accepts queries
	CertFailures int64  // wsrep_local_cert_failures since the node started
	BFAborts     int64  // wsrep_local_bf_aborts since the node started
}

// Synced reports whether the node is a synced member of a primary component.
func (s NodeStatus) Synced() bool {
	return s.State == "Synced" && s.Component == "Primary" && s.Ready
}

// Group communication timeouts. The defaults take about 6 s to notice a
// dead peer; these take about 3 s. The keepalive must stay below a third of
// the suspect timeout (the provider refuses to start otherwise), and the
// suspect timeout well above the stalls a busy 2-core machine produces.
const evsOptions = "evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.inactive_check_period=PT0.5S"

const (
	// nodeReadyTimeout bounds a node's start: a joiner may need a full
	// state transfer first.
	nodeReadyTimeout = 120 * time.Second
	nodeStopTimeout  = 30 * time.Second
	recoverTimeout   = 60 * time.Second
)

// StartCluster starts a cluster of opts.Nodes nodes, installing MariaDB and
// the Galera provider when missing: it initialises the first node's data
// dir, bootstraps the cluster on it and lets the others join with a full
// state transfer, one by one. It returns once every node is Synced in a
// primary component of all of them. On error nothing is left behind.
func StartCluster(ctx context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	n := opts.Nodes
	if n == 0 {
		n = 3
	}
	if n < 1 || n > 9 {
		return nil, errors.New("localdb: a cluster has 1 to 9 nodes")
	}
	logw := opts.Log
	if logw == nil {
		logw = io.Discard
	}
	bins, err := ensureGaleraBinaries(ctx, logw, !opts.NoInstall)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bins: bins, log: logw, sb: newSwitchboard(),
		name: fmt.Sprintf("gateway-%06d", rand.IntN(1_000_000))}
	if os.Geteuid() == 0 {
		// Nodes must not run as root: the rsync state transfer then fails
		// and the joiner aborts.
		if c.runAs, err = lookupCredential("mysql"); err != nil {
			return nil, err
		}
	}
	parent := opts.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	if c.dir, err = os.MkdirTemp(parent, "galera-"); err != nil {
		return nil, fmt.Errorf("localdb: cluster dir: %w", err)
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.runAs != nil {
		if err := os.Chmod(c.dir, 0o711); err != nil {
			return nil, fmt.Errorf("localdb: cluster dir: %w", err)
		}
		if err := reachable(c.dir, c.runAs); err != nil {
			return nil, err
		}
	}

	// Each node's group communication gets an address of its own,
	// 127.A.B.(i+1), which is how the proxies tell the nodes apart.
	netA, netB := 16+rand.IntN(230), 1+rand.IntN(254)
	taken := map[int]bool{}
	for i := range n {
		node := &Node{c: c, index: i, name: fmt.Sprintf("node%d", i),
			dataDir: filepath.Join(c.dir, fmt.Sprintf("node%d", i)),
			cnf:     filepath.Join(c.dir, fmt.Sprintf("node%d.cnf", i)),
			ip:      fmt.Sprintf("127.%d.%d.%d", netA, netB, i+1)}
		ln, err := gcommPort(node.ip)
		if err != nil {
			return nil, fmt.Errorf("localdb: a port for %s's group communication on %s (this needs the whole of 127.0.0.0/8 on loopback, as Linux has): %w", node.name, node.ip, err)
		}
		node.gcPort = ln.Addr().(*net.TCPAddr).Port
		taken[node.gcPort] = true
		for _, p := range []*int{&node.sqlPort, &node.istPort, &node.sstPort} {
			if *p, err = freeLowPort(taken); err != nil {
				ln.Close()
				return nil, err
			}
		}
		if node.status, err = statusDB(node.Addr()); err != nil {
			ln.Close()
			return nil, err
		}
		c.sb.register(i, node.ip)
		node.proxy = c.sb.proxy(i, ln, net.JoinHostPort(node.ip, strconv.Itoa(node.gcPort)))
		c.nodes = append(c.nodes, node)
	}
	for _, node := range c.nodes {
		if err := c.prepare(node, opts.Settings); err != nil {
			return nil, err
		}
	}

	began := time.Now()
	first := c.nodes[0]
	if err := c.initDataDir(ctx, first); err != nil {
		return nil, err
	}
	if err := writeInitFile(first.dataDir); err != nil {
		return nil, err
	}
	if err := c.chown(first.dataDir); err != nil {
		return nil, err
	}
	fmt.Fprintf(logw, "bootstrapping cluster %s on %s\n", c.name, first.name)
	if err := first.start(ctx, "--wsrep-new-cluster", "--init-file="+filepath.Join(first.dataDir, initFileName)); err != nil {
		return nil, err
	}
	// Joiners receive a full copy from a donor; one at a time, so that
	// none waits for a busy donor.
	for _, node := range c.nodes[1:] {
		if err := node.start(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.WaitSynced(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(logw, "cluster %s of %d nodes synced after %s\n", c.name, n, time.Since(began).Round(time.Millisecond))
	return c, nil
}

// Nodes returns the cluster's nodes, in order.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns node i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Name is the cluster's wsrep_cluster_name.
func (c *Cluster) Name() string { return c.name }

// Addr returns the node's SQL address, "127.0.0.1:PORT".
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.sqlPort)) }

// DSN returns a go-sql-driver DSN for root on this node, selecting database
// (which may be empty).
func (n *Node) DSN(database string) string { return "root@tcp(" + n.Addr() + ")/" + database }

// Name is the node's wsrep_node_name.
func (n *Node) Name() string { return n.name }

// ErrorLog is the path of the node's error log.
func (n *Node) ErrorLog() string { return filepath.Join(n.dataDir, errorLogName) }

// Running reports whether the node's server process is alive.
func (n *Node) Running() bool { return n.running() != nil }

func (n *Node) running() *nodeProc {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || n.proc.exited() {
		return nil
	}
	return n.proc
}

// Status asks the node for its wsrep status.
func (n *Node) Status(ctx context.Context) (NodeStatus, error) {
	var st NodeStatus
	rows, err := n.status.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN
    ('wsrep_local_state_comment', 'wsrep_cluster_status', 'wsrep_cluster_size', 'wsrep_ready',
     'wsrep_local_cert_failures', 'wsrep_local_bf_aborts')`)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return st, err
		}
		switch strings.ToLower(name) {
		case "wsrep_local_state_comment":
			st.State = value
		case "wsrep_cluster_status":
			st.Component = value
		case "wsrep_cluster_size":
			st.Size, _ = strconv.Atoi(value)
		case "wsrep_ready":
			st.Ready = value == "ON"
		case "wsrep_local_cert_failures":
			st.CertFailures, _ = strconv.ParseInt(value, 10, 64)
		case "wsrep_local_bf_aborts":
			st.BFAborts, _ = strconv.ParseInt(value, 10, 64)
		}
	}
	return st, rows.Err()
}

// Wait polls the node's status until ok accepts it, the node's process
// exits, ctx ends or timeout passes.
func (n *Node) Wait(ctx context.Context, timeout time.Duration, what string, ok func(NodeStatus) bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		p := n.running()
		if p == nil {
			return fmt.Errorf("localdb: %s is not running while waiting until %s\n%s", n.name, what, n.diagnostics(p))
		}
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := n.Status(qctx)
		cancel()
		if err == nil && ok(st) {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%+v", st)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localdb: %s: waiting until %s: %w (last: %s)", n.name, what, ctx.Err(), last)
		case <-deadline.C:
			return fmt.Errorf("localdb: %s is not %s after %s (last: %s)\n%s", n.name, what, timeout, last, n.diagnostics(p))
		case <-p.done:
		case <-tick.C:
		}
	}
}

// WaitSynced waits until every node is Synced in one primary component of
// them all (after a restart or a healed partition, say).
func (c *Cluster) WaitSynced(ctx context.Context) error {
	want := len(c.nodes)
	for _, n := range c.nodes {
		err := n.Wait(ctx, nodeReadyTimeout, fmt.Sprintf("synced in a cluster of %d", want), func(st NodeStatus) bool {
			return st.Synced() && st.Size == want
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Kill ends node i with SIGKILL, with whatever state transfer it was
// running, and waits until it is gone.
func (c *Cluster) Kill(i int) error {
	n := c.nodes[i]
	p := n.running()
	if p == nil {
		return fmt.Errorf("localdb: %s is not running", n.name)
	}
	// The process group holds the node's state transfer scripts as well.
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("localdb: kill %s: %w", n.name, err)
	}
	<-p.done
	fmt.Fprintf(c.log, "%s killed (pid %d)\n", n.name, p.cmd.Process.Pid)
	return nil
}

// Restart starts node i again after a Kill, from the position its data
// recovers to (so that it can catch up incrementally rather than by a full
// copy), and waits until it is Synced.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	n := c.nodes[i]
	if n.running() != nil {
		return fmt.Errorf("localdb: %s is still running", n.name)
	}
	pos, err := n.recoverPosition(ctx)
	if err != nil {
		return err
	}
	var extra []string
	if pos != "" {
		extra = append(extra, "--wsrep-start-position="+pos)
	}
	return n.start(ctx, extra...)
}

// Isolate cuts node i's group communication with every other node: its
// open connections are reset and new ones refused until Heal. Clients still
// reach it over SQL, and it tells them it is outside the primary component.
func (c *Cluster) Isolate(i int) {
	c.sb.isolate(i)
	fmt.Fprintf(c.log, "%s isolated from the others\n", c.nodes[i].name)
}

// Heal undoes Isolate; the node then rejoins by itself.
func (c *Cluster) Heal(i int) {
	c.sb.heal(i)
	fmt.Fprintf(c.log, "%s reachable again\n", c.nodes[i].name)
}

// Isolated reports whether node i is cut off.
func (c *Cluster) Isolated(i int) bool { return c.sb.isolated(i) }

// CopyLogs copies every node's error log into dir, as nodeN.err.
func (c *Cluster) CopyLogs(dir string) error {
	var errs []error
	for _, n := range c.nodes {
		b, err := os.ReadFile(n.ErrorLog())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.WriteFile(filepath.Join(dir, n.name+".err"), b, 0o644))
	}
	return errors.Join(errs...)
}

// Stop shuts every node down (SIGTERM, then SIGKILL), closes the proxies
// and removes the cluster's directory. Calling it again returns the first
// call's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		errs := make([]error, len(c.nodes))
		var wg sync.WaitGroup
		for i, n := range c.nodes {
			wg.Go(func() { errs[i] = n.stop() })
		}
		wg.Wait()
		for _, n := range c.nodes {
			n.proxy.close()
			n.status.Close()
		}
		if c.dir != "" {
			errs = append(errs, os.RemoveAll(c.dir))
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

func (n *Node) stop() error {
	p := n.running()
	if p == nil {
		return nil
	}
	pid := p.cmd.Process.Pid
	fmt.Fprintf(n.c.log, "stopping %s (pid %d)\n", n.name, pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(nodeStopTimeout)
	defer t.Stop()
	var err error
	select {
	case <-p.done:
	case <-t.C:
		err = fmt.Errorf("localdb: %s (pid %d) did not shut down within %s and was killed", n.name, pid, nodeStopTimeout)
	}
	// Whatever is left of its group (a state transfer's rsync) goes too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-p.done
	return err
}

// start launches the node's server and waits until it is Synced.
func (n *Node) start(ctx context.Context, extra ...string) error {
	args := append([]string{"--defaults-file=" + n.cnf}, extra...)
	p := &nodeProc{output: &tailWriter{max: 8 << 10}, done: make(chan struct{})}
	p.cmd = exec.Command(n.c.bins.server, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	p.cmd.SysProcAttr = sysProcAttr()
	p.cmd.SysProcAttr.Credential = n.c.runAs
	fmt.Fprintf(n.c.log, "starting %s on %s (group communication %s via 127.0.0.1:%d)\n", n.name, n.Addr(), n.ip, n.gcPort)
	began := time.Now()
	if err := startPinned(p.cmd, &p.err, p.done); err != nil {
		return fmt.Errorf("localdb: start %s: %w", n.name, err)
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	if err := n.Wait(ctx, nodeReadyTimeout, "synced", NodeStatus.Synced); err != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return err
	}
	fmt.Fprintf(n.c.log, "%s synced after %s\n", n.name, time.Since(began).Round(time.Millisecond))
	return nil
}

// recoverPosition asks the server for the last transaction its data holds
// (uuid:seqno), as the distribution's galera_recovery script does; "" when
// the server skipped recovery.
func (n *Node) recoverPosition(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	out := &tailWriter{max: 64 << 10}
	cmd := exec.CommandContext(ctx, n.c.bins.server, "--defaults-file="+n.cnf, "--wsrep-recover", "--disable-log-error")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = n.c.runAs
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("localdb: recover %s's position: %w\n%s", n.name, err, lastLines(out.String(), 20))
	}
	const marker = "WSREP: Recovered position:"
	for _, line := range strings.Split(out.String(), "\n") {
		if _, pos, ok := strings.Cut(line, marker); ok {
			return strings.TrimSpace(pos), nil
		}
	}
	return "", nil
}

// diagnostics returns the tail of the node's error log and of its output.
func (n *Node) diagnostics(p *nodeProc) string {
	var b strings.Builder
	if tail := lastLines(readFrom(n.ErrorLog(), 0), 30); tail != "" {
		fmt.Fprintf(&b, "--- %s (tail) ---\n%s\n", n.ErrorLog(), tail)
	}
	if p != nil {
		if out := lastLines(p.output.String(), 15); out != "" {
			fmt.Fprintf(&b, "--- %s output (tail) ---\n%s\n", n.name, out)
		}
		if p.exited() {
			fmt.Fprintf(&b, "exit: %v\n", p.err)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// prepare writes node's defaults file and creates its data dir.
func (c *Cluster) prepare(n *Node, settings []string) error {
	if err := os.MkdirAll(n.dataDir, 0o700); err != nil {
		return fmt.Errorf("localdb: %w", err)
	}
	if err := c.chown(n.dataDir); err != nil {
		return err
	}
	var peers []string
	for _, o := range c.nodes {
		if o != n {
			peers = append(peers, "127.0.0.1:"+strconv.Itoa(o.gcPort)) // their proxies
		}
	}
	provider := fmt.Sprintf("gmcast.listen_addr=tcp://%s:%d;ist.recv_addr=tcp://127.0.0.1:%d;gcache.size=128M;%s",
		n.ip, n.gcPort, n.istPort, evsOptions)
	lines := []string{
		"[mysqld]",
		"datadir=" + n.dataDir,
		"socket=" + socketPath(n.dataDir),
		"pid-file=" + filepath.Join(n.dataDir, pidFileName),
		"port=" + strconv.Itoa(n.sqlPort),
		"bind-address=127.0.0.1",
		"log-error=" + n.ErrorLog(),
		"skip-name-resolve",
		"skip-log-bin",
		"max-connections=500",
		"innodb-buffer-pool-size=128M",
		"character-set-server=utf8mb4",
		"binlog-format=ROW",
		"default-storage-engine=InnoDB",
		"innodb-autoinc-lock-mode=2",
		"wsrep-on=ON",
		"wsrep-provider=" + c.bins.provider,
		"wsrep-cluster-name=" + c.name,
		"wsrep-cluster-address=gcomm://" + strings.Join(peers, ","),
		"wsrep-node-name=" + n.name,
		"wsrep-node-address=127.0.0.1",
		"wsrep-node-incoming-address=" + n.Addr(),
		"wsrep-sst-method=rsync",
		"wsrep-sst-receive-address=127.0.0.1:" + strconv.Itoa(n.sstPort),
		`wsrep-provider-options="` + provider + `"`,
	}
	lines = append(lines, settings...)
	if err := os.WriteFile(n.cnf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("localdb: write %s: %w", n.cnf, err)
	}
	return nil
}

// initDataDir creates the first node's system tables (the others receive a
// copy when they join), as the user the node runs as.
func (c *Cluster) initDataDir(ctx context.Context, n *Node) error {
	args := []string{"--no-defaults", "--datadir=" + n.dataDir}
	help, _ := exec.CommandContext(ctx, c.bins.installer, "--help").CombinedOutput()
	if strings.Contains(string(help), "--auth-root-authentication-method") {
		args = append(args, "--auth-root-authentication-method=normal")
	}
	if strings.Contains(string(help), "--skip-test-db") {
		args = append(args, "--skip-test-db")
	}
	fmt.Fprintf(c.log, "initialising %s's data dir with %s\n", n.name, filepath.Base(c.bins.installer))
	out := &tailWriter{max: 8 << 10}
	cmd := exec.CommandContext(ctx, c.bins.installer, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.runAs}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("localdb: %s %s: %w\n%s", c.bins.installer, strings.Join(args, " "), err, lastLines(out.String(), 30))
	}
	return nil
}

// chown hands path to the user the nodes run as.
func (c *Cluster) chown(path string) error {
	if c.runAs == nil {
		return nil
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.runAs.Uid), int(c.runAs.Gid))
	})
}

// lookupCredential returns the ids of an unprivileged account.
func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("localdb: cluster nodes must not run as root, and there is no %q user to run them as (the mariadb-server package creates it; or: useradd --system %s): %w", name, name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("localdb: user %s has ids %s:%s", name, u.Uid, u.Gid)
	}
	// No supplementary groups: root's must not come along.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// reachable checks that the account can traverse every directory above
// dir, so that a node running as it can open its data dir.
func reachable(dir string, cred *syscall.Credential) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("localdb: %w", err)
		}
		mode := fi.Mode().Perm()
		st, _ := fi.Sys().(*syscall.Stat_t)
		ok := mode&0o001 != 0 ||
			(st != nil && st.Uid == cred.Uid && mode&0o100 != 0) ||
			(st != nil && st.Gid == cred.Gid && mode&0o010 != 0)
		if !ok {
			return fmt.Errorf("localdb: cluster nodes run as uid %d, which cannot enter %s (mode %v): choose another ClusterOptions.Dir", cred.Uid, d, mode)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// freeLowPort picks a free 127.0.0.1 port below the ephemeral range that is
// not in taken, and adds it there. The port is closed again: the node binds
// it later, and again after every restart.
func freeLowPort(taken map[int]bool) (int, error) {
	for range 20 {
		ln, err := ListenLowPort("127.0.0.1")
		if err != nil {
			return 0, fmt.Errorf("localdb: find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !taken[port] {
			taken[port] = true
			return port, nil
		}
	}
	return 0, errors.New("localdb: no free port found")
}

// statusDB is a small pool for status queries, quick to give up on a node
// that is down.
func statusDB(addr string) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = addr
	cfg.Timeout = time.Second
	cfg.ReadTimeout = 3 * time.Second
	cfg.WriteTimeout = 3 * time.Second
	cfg.Logger = &mysql.NopLogger{}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("localdb: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	db.SetConnMaxIdleTime(10 * time.Second)
	return db, nil
}

// galeraBinaries are the programs and the library a cluster needs.
type galeraBinaries struct {
	binaries
	provider string // libgalera_smm.so
}

// providerPaths are where distributions put the Galera 4 provider.
var providerPaths = []string{
	"/usr/lib/galera/libgalera_smm.so",
	"/usr/lib/libgalera_smm.so",
	"/usr/lib64/galera-4/libgalera_smm.so",
	"/usr/lib64/galera/libgalera_smm.so",
	"/usr/lib/galera-4/libgalera_smm.so",
}

// findGalera returns what of a cluster's needs is missing: the provider, the
// rsync state transfer script and rsync itself.
func findGalera() (provider string, missing []string) {
	for _, p := range providerPaths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			provider = p
			break
		}
	}
	if provider == "" {
		missing = append(missing, "galera-4")
	}
	if findBinary("wsrep_sst_rsync") == "" {
		missing = append(missing, "mariadb-server")
	}
	if findBinary("rsync") == "" {
		missing = append(missing, "rsync")
	}
	return provider, missing
}

// ensureGaleraBinaries finds MariaDB, the Galera provider and rsync,
// installing the packages with apt-get when any is missing and install is
// set.
func ensureGaleraBinaries(ctx context.Context, logw io.Writer, install bool) (galeraBinaries, error) {
	server, installer, _ := FindBinaries()
	provider, missing := findGalera()
	if (server == "" || installer == "" || len(missing) > 0) && !install {
		return galeraBinaries{}, fmt.Errorf("%w: %s; install them with: sudo apt-get install -y mariadb-server galera-4 rsync (make chaos-cluster does that for you)",
			ErrNotInstalled, strings.Join(append(missing, missingServer(server, installer)...), ", "))
	}
	if server == "" || installer == "" || len(missing) > 0 {
		fmt.Fprintf(logw, "a Galera cluster needs mariadb-server, galera-4 and rsync; missing: %s\n",
			strings.Join(append(missing, missingServer(server, installer)...), ", "))
		if err := aptInstall(ctx, logw, "mariadb-server", "galera-4", "rsync"); err != nil {
			return galeraBinaries{}, err
		}
		server, installer, _ = FindBinaries()
		provider, missing = findGalera()
		if server == "" || installer == "" || len(missing) > 0 {
			return galeraBinaries{}, fmt.Errorf("localdb: still missing after installing: %s",
				strings.Join(append(missing, missingServer(server, installer)...), ", "))
		}
	}
	maria, err := isMariaDB(ctx, server)
	if err != nil {
		return galeraBinaries{}, err
	}
	if !maria {
		return galeraBinaries{}, fmt.Errorf("localdb: %s is not MariaDB; a Galera cluster needs MariaDB's server", server)
	}
	return galeraBinaries{binaries: binaries{server: server, installer: installer, mariaDB: true}, provider: provider}, nil
}

func missingServer(server, installer string) []string {
	if server == "" || installer == "" {
		return []string{"mariadbd/mariadb-install-db"}
	}
	return nil
}
