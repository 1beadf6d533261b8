package localdb

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	dir := t.TempDir()
	logw := testWriter{t}

	began := time.Now()
	srv, err := Start(t.Context(), Options{DataDir: dir, Log: logw})
	if errors.Is(err, ErrCannotInstall) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	t.Logf("cold start (init + start): %s", time.Since(began))

	if want := "root@tcp(" + srv.Addr() + ")/x"; srv.DSN("x") != want {
		t.Errorf("DSN(x) = %q, want %q", srv.DSN("x"), want)
	}
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") || strings.HasSuffix(srv.Addr(), ":3306") {
		t.Errorf("Addr() = %q, want 127.0.0.1 and a port other than 3306", srv.Addr())
	}

	db := openDB(t, srv.DSN(""))
	mustExec(t, db, "CREATE DATABASE x")
	xdb := openDB(t, srv.DSN("x"))
	mustExec(t, xdb, "CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL DEFAULT 0)")
	mustExec(t, xdb, "CREATE TRIGGER t_bump BEFORE INSERT ON t FOR EACH ROW SET NEW.n = NEW.id * 10")
	mustExec(t, xdb, "INSERT INTO t (id) VALUES (4)")
	if n := queryInt(t, xdb, "SELECT n FROM t WHERE id = 4"); n != 40 {
		t.Errorf("trigger did not fire: n = %d, want 40", n)
	}
	db.Close()
	xdb.Close()

	t.Run("second server on same data dir", func(t *testing.T) {
		_, err := Start(t.Context(), Options{DataDir: dir})
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Start on a busy data dir: err = %v, want an error naming %s", err, dir)
		}
	})

	pid := srv.cmd.Process.Pid
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if running(dir) {
		t.Fatalf("server (pid %d) still running after Stop", pid)
	}
	if _, err := os.Stat(filepath.Join(dir, pidFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file left behind after Stop: %v", err)
	}

	// A pid file whose process is gone, as after a crash, must not block
	// the next start.
	writeStalePidFile(t, dir)
	began = time.Now()
	srv2, err := Start(t.Context(), Options{DataDir: dir, Log: logw})
	if err != nil {
		t.Fatalf("warm restart: %v", err)
	}
	t.Cleanup(func() { srv2.Stop() })
	t.Logf("warm restart: %s", time.Since(began))
	if n := queryInt(t, openDB(t, srv2.DSN("x")), "SELECT n FROM t WHERE id = 4"); n != 40 {
		t.Errorf("after restart n = %d, want 40", n)
	}
	if err := srv2.Stop(); err != nil {
		t.Fatalf("Stop after restart: %v", err)
	}

	t.Run("explicit port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		began := time.Now()
		srv, err := Start(t.Context(), Options{DataDir: dir, Port: port, Log: logw})
		if err == nil {
			srv.Stop()
			t.Fatalf("Start on busy port %d succeeded", port)
		}
		if !errors.Is(err, errPortInUse) {
			t.Errorf("err = %v, want errPortInUse", err)
		}
		t.Logf("failed after %s with: %v", time.Since(began), err)
		if running(dir) {
			t.Error("server still running after failed Start")
		}
	})

	t.Run("cancelled start leaves nothing running", func(t *testing.T) {
		// Cancel once the server process exists, so that Start has to
		// kill it rather than merely not start it.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		onStart := cancelOn{prefix: "starting ", cancel: cancel, w: logw}
		srv, err := Start(ctx, Options{DataDir: dir, Log: onStart})
		if err == nil {
			srv.Stop()
			t.Fatal("Start succeeded despite a cancelled context")
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if running(dir) {
			t.Error("server still running after cancelled Start")
		}
	})
}

func TestFindBinaries(t *testing.T) {
	server, installDB, err := FindBinaries()
	if err != nil {
		t.Skip(err)
	}
	for _, p := range []string{server, installDB} {
		if !filepath.IsAbs(p) {
			t.Errorf("FindBinaries returned relative path %q", p)
		}
	}
}

func TestSocketPathFitsSunPath(t *testing.T) {
	long := "/tmp/" + strings.Repeat("d", 200)
	if p := socketPath(long); len(p) > maxSocketPath {
		t.Errorf("socketPath(long) = %q (%d bytes)", p, len(p))
	}
	if p := socketPath("/tmp/x"); p != "/tmp/x/mysqld.sock" {
		t.Errorf("socketPath(short) = %q, want it inside the data dir", p)
	}
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func queryInt(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// writeStalePidFile writes the pid of a process that has exited and been
// reaped.
func writeStalePidFile(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(cmd.Process.Pid) + "\n"
	if err := os.WriteFile(filepath.Join(dir, pidFileName), []byte(pid), 0o600); err != nil {
		t.Fatal(err)
	}
}

// running reports whether any process was started with --datadir=dir.
func running(dir string) bool { return runningWith("--datadir=" + dir) }

// runningWith reports whether any process was started with the argument arg.
func runningWith(arg string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	want := []byte(arg + "\x00")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, want) {
			return true
		}
	}
	return false
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// cancelOn calls cancel when a progress line starts with prefix.
type cancelOn struct {
	prefix string
	cancel context.CancelFunc
	w      io.Writer
}

func (c cancelOn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte(c.prefix)) {
		c.cancel()
	}
	return c.w.Write(p)
}
