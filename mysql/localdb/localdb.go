// Package localdb owns private, throwaway MariaDB servers for development
// and tests: it locates (or installs) the server binaries, initialises a data
// directory, runs mariadbd bound to 127.0.0.1 on a port of its own and shuts
// it down again. A private server never reads the machine's my.cnf and never
// touches a system-wide MySQL/MariaDB that may be running next to it. It also
// owns private Galera clusters (StartCluster) whose nodes can be killed and
// cut off from each other, for chaos runs and tests.
package localdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Options configure a private server.
type Options struct {
	DataDir string    // required; created if missing; initialised with mariadb-install-db if it holds no `mysql` system dir
	Port    int       // 0 = pick a free 127.0.0.1 port (3306 may be taken by another server)
	Log     io.Writer // progress lines for humans; nil = io.Discard
	// NoInstall refuses to install a missing server: the error says what
	// to install instead (tests use it; make test and make run install).
	NoInstall bool
	// BufferPool is innodb_buffer_pool_size in bytes; 0 = 128 MiB, enough
	// for tests and small benchmarks. A server holding a large history
	// needs its hot indexes in the pool, as a production one is sized. The
	// redo log (innodb_log_file_size) is a quarter of it, 96 MiB at least.
	BufferPool int64
}

// Server is a running private server. Stop it when done: it is deliberately
// not tied to the context given to Start.
type Server struct {
	name    string // base name of the server binary, for messages
	dataDir string
	port    int
	log     io.Writer
	cmd     *exec.Cmd
	output  *tailWriter // the server's own stdout/stderr (early failures land here)
	lock    *os.File    // flock on the data dir, held until Stop

	errLogOffset int64 // size of the error log before this run

	done    chan struct{} // closed once the process has been reaped
	waitErr error         // result of cmd.Wait; read only after done is closed

	stopOnce sync.Once
	stopErr  error
}

const (
	// readyTimeout bounds the wait for a started server to accept
	// connections, so that callers passing context.Background() cannot hang
	// forever on a wedged server. A cold start takes a few seconds.
	readyTimeout = 90 * time.Second
	pollInterval = 50 * time.Millisecond
	stopTimeout  = 20 * time.Second
	// portAttempts is how often Start picks a new port when another process
	// grabbed the free port between our probe and the server's bind.
	portAttempts = 5

	pidFileName   = "mysqld.pid"
	errorLogName  = "error.log"
	initFileName  = "localdb-init.sql"
	lockFileName  = "localdb.lock"
	socketName    = "mysqld.sock"
	maxSocketPath = 100 // sun_path is 104 bytes on BSDs/macOS, 108 on Linux
)

// errPortInUse marks a start that failed only because the port was taken.
var errPortInUse = errors.New("port already in use")

// Start runs a private server on opts.DataDir, installing and initialising
// whatever is missing first. It returns once the server accepts connections
// from root over TCP. If ctx is cancelled before then, the half-started
// server is killed.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.DataDir == "" {
		return nil, errors.New("localdb: Options.DataDir is required")
	}
	logw := opts.Log
	if logw == nil {
		logw = io.Discard
	}
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("localdb: data dir: %w", err)
	}

	bins, err := ensureBinaries(ctx, logw, !opts.NoInstall)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("localdb: create data dir: %w", err)
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	s, err := start(ctx, bins, dataDir, opts.Port, opts.BufferPool, logw)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

func start(ctx context.Context, bins binaries, dataDir string, port int, bufferPool int64, logw io.Writer) (*Server, error) {
	if err := removeStalePidFile(dataDir, logw); err != nil {
		return nil, err
	}
	if !initialised(dataDir) {
		if err := initDataDir(ctx, bins, dataDir, logw); err != nil {
			return nil, err
		}
	}
	if err := writeInitFile(dataDir); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		p := port
		if p == 0 {
			var err error
			if p, err = freePort(); err != nil {
				return nil, err
			}
		}
		s, err := launch(ctx, bins, dataDir, p, bufferPool, logw)
		if err == nil {
			return s, nil
		}
		if port != 0 || !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return nil, err
		}
		fmt.Fprintf(logw, "port %d was taken before %s could bind it; trying another\n", p, filepath.Base(bins.server))
	}
}

// launch starts the server process on port and waits until it is usable.
func launch(ctx context.Context, bins binaries, dataDir string, port int, bufferPool int64, logw io.Writer) (*Server, error) {
	s := &Server{
		name:    filepath.Base(bins.server),
		dataDir: dataDir,
		port:    port,
		log:     logw,
		output:  &tailWriter{max: 8 << 10},
		// The error log accumulates across runs; only this run's part is
		// relevant when explaining a failure.
		errLogOffset: fileSize(filepath.Join(dataDir, errorLogName)),
		done:         make(chan struct{}),
	}
	s.cmd = exec.Command(bins.server, serverArgs(bins, dataDir, port, bufferPool)...)
	s.cmd.Stdout = s.output
	s.cmd.Stderr = s.output
	s.cmd.SysProcAttr = sysProcAttr()

	fmt.Fprintf(logw, "starting %s on %s (data dir %s)\n", s.name, s.Addr(), dataDir)
	began := time.Now()
	if err := startPinned(s.cmd, &s.waitErr, s.done); err != nil {
		return nil, fmt.Errorf("localdb: start %s: %w", bins.server, err)
	}

	if err := s.waitReady(ctx); err != nil {
		s.kill()
		diag := s.diagnostics()
		if !errors.Is(err, errPortInUse) && isPortInUse(diag) {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return nil, fmt.Errorf("localdb: %s on %s did not become ready: %w\n%s", s.name, s.Addr(), err, diag)
	}
	fmt.Fprintf(logw, "%s ready on %s after %s\n", s.name, s.Addr(), time.Since(began).Round(time.Millisecond))
	return s, nil
}

// startPinned starts cmd and reaps it in the background: once it has
// exited, *waitErr holds Wait's result and done is closed.
//
// On Linux the child gets a parent-death signal, and the kernel sends it
// when the forking *thread* exits, not the process. The goroutine that
// starts the child keeps its thread for the child's whole life so the
// runtime cannot retire that thread early. There is deliberately no
// UnlockOSThread: the thread is discarded when the goroutine returns, which
// is after the child has been reaped.
func startPinned(cmd *exec.Cmd, waitErr *error, done chan<- struct{}) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		*waitErr = cmd.Wait()
		close(done)
	}()
	return <-started
}

// serverArgs are the server's complete settings: --no-defaults (first, as
// the server requires) keeps the machine's my.cnf out of the picture.
// bufferPool is innodb_buffer_pool_size in bytes, 0 for 128 MiB.
func serverArgs(bins binaries, dataDir string, port int, bufferPool int64) []string {
	if bufferPool <= 0 {
		bufferPool = 128 << 20
	}
	args := []string{
		"--no-defaults",
		"--datadir=" + dataDir,
		"--socket=" + socketPath(dataDir),
		"--pid-file=" + filepath.Join(dataDir, pidFileName),
		"--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--log-error=" + filepath.Join(dataDir, errorLogName),
		// The init file guarantees a root@127.0.0.1 account, which is
		// what makes --skip-name-resolve safe: with name resolution off,
		// TCP clients only match IP-based accounts, so authentication
		// no longer depends on how this machine resolves 127.0.0.1.
		"--init-file=" + filepath.Join(dataDir, initFileName),
		"--skip-name-resolve",
		"--skip-log-bin",
		"--max-connections=1000",
		"--innodb-buffer-pool-size=" + strconv.FormatInt(bufferPool, 10),
		// A redo log a quarter of the pool (the server's 96 MiB at least):
		// a bulk load into a large pool otherwise spends its time flushing
		// pages to advance the checkpoint of a log it fills in seconds.
		"--innodb-log-file-size=" + strconv.FormatInt(max(bufferPool/4, 96<<20), 10),
		// Match what production schemas expect instead of MariaDB's
		// latin1 default.
		"--character-set-server=utf8mb4",
	}
	if !bins.mariaDB {
		// MySQL 8's X plugin would otherwise listen on 33060 and collide
		// with the system server; loose- because 5.7 lacks the plugin.
		args = append(args, "--loose-mysqlx=OFF")
	}
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root unless told to.
		args = append(args, "--user=root")
	}
	return args
}

// socketPath is <datadir>/mysqld.sock unless that exceeds what a unix
// socket address can hold (deep t.TempDir paths do), in which case it falls
// back to a short per-data-dir name in the temp dir; the server removes the
// socket on shutdown.
func socketPath(dataDir string) string {
	p := filepath.Join(dataDir, socketName)
	if len(p) <= maxSocketPath {
		return p
	}
	h := fnv.New32a()
	h.Write([]byte(dataDir))
	return filepath.Join(os.TempDir(), fmt.Sprintf("localdb-%08x.sock", h.Sum32()))
}

// waitReady polls until root can log in over TCP and the server answering
// is really ours.
func (s *Server) waitReady(ctx context.Context) error {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = s.Addr()
	cfg.Timeout = time.Second
	// Refused and reset connections are expected while the server boots;
	// don't let the driver print them.
	cfg.Logger = &mysql.NopLogger{}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("connector: %w", err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()

	// Abandon a ping in flight once the server has exited: whatever then
	// holds the port (if anything) may never answer.
	pingCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-pingCtx.Done():
		}
	}()

	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := s.ping(pingCtx, db)
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("server exited during startup (%v)", s.waitErr)
		default:
		}
		var myErr *mysql.MySQLError
		if errors.As(err, &myErr) && myErr.Number == 1045 {
			// The server only accepts connections after running the init
			// file, so an access denied now will not go away by waiting.
			return fmt.Errorf("root cannot log in over TCP: %w", err)
		}
		if errors.Is(err, errPortInUse) {
			return err
		}
		select {
		case <-s.done:
			return fmt.Errorf("server exited during startup (%v)", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		case <-deadline.C:
			return fmt.Errorf("not accepting connections after %s: %w", readyTimeout, err)
		case <-tick.C:
		}
	}
}

func (s *Server) ping(ctx context.Context, db *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var dir string
	if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&dir); err != nil {
		return err
	}
	// Another server may have won the race for the port while ours failed
	// to bind it; never hand out a DSN pointing at someone else's server.
	if !sameDir(dir, s.dataDir) {
		return fmt.Errorf("%w: %s is served by a server with data dir %s", errPortInUse, s.Addr(), dir)
	}
	return nil
}

func sameDir(a, b string) bool {
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ra == rb
}

// kill ends a server that never became ready; there is nothing to shut
// down gracefully yet.
func (s *Server) kill() {
	select {
	case <-s.done:
	default:
		if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			fmt.Fprintf(s.log, "killing %s (pid %d): %v\n", s.name, s.cmd.Process.Pid, err)
		}
		<-s.done
	}
	// A killed or aborted server may leave its pid file behind, and we
	// know that it is dead.
	os.Remove(filepath.Join(s.dataDir, pidFileName))
}

// diagnostics returns what the server said during this run: the new part of
// its error log and anything it printed before it opened that log.
func (s *Server) diagnostics() string {
	errLog := filepath.Join(s.dataDir, errorLogName)
	var b strings.Builder
	if tail := lastLines(readFrom(errLog, s.errLogOffset), 30); tail != "" {
		fmt.Fprintf(&b, "--- %s (tail) ---\n%s\n", errLog, tail)
	}
	if out := lastLines(s.output.String(), 15); out != "" {
		fmt.Fprintf(&b, "--- %s output (tail) ---\n%s\n", s.name, out)
	}
	if b.Len() == 0 {
		return "(the server wrote nothing to its error log)"
	}
	return strings.TrimRight(b.String(), "\n")
}

func isPortInUse(diag string) bool {
	return strings.Contains(diag, "Address already in use") ||
		strings.Contains(diag, "Bind on TCP/IP port")
}

// DSN returns a go-sql-driver DSN for root on this server, selecting
// database (which may be empty). It carries no parameters; callers append
// their own.
func (s *Server) DSN(database string) string {
	return "root@tcp(" + s.Addr() + ")/" + database
}

// Addr returns the server's TCP address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Stop shuts the server down: SIGTERM, then SIGKILL if it has not exited
// within stopTimeout. Calling it again returns the first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stopErr = s.stop()
		s.lock.Close()
	})
	return s.stopErr
}

func (s *Server) stop() error {
	pid := s.cmd.Process.Pid
	select {
	case <-s.done:
		return fmt.Errorf("localdb: %s (pid %d) had already exited: %v\n%s",
			s.name, pid, s.waitErr, s.diagnostics())
	default:
	}
	fmt.Fprintf(s.log, "stopping %s on %s (pid %d)\n", s.name, s.Addr(), pid)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("localdb: signal %s (pid %d): %w", s.name, pid, err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
		if s.waitErr != nil {
			return fmt.Errorf("localdb: %s (pid %d) did not shut down cleanly: %w", s.name, pid, s.waitErr)
		}
		return nil
	case <-timer.C:
		s.kill()
		return fmt.Errorf("localdb: %s (pid %d) did not shut down within %s and was killed", s.name, pid, stopTimeout)
	}
}

// freePort asks the kernel for an unused 127.0.0.1 port. The port is free
// only until someone else takes it; start retries when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localdb: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the contents of path from offset on, or "" if unreadable.
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return ""
	}
	return string(b)
}
