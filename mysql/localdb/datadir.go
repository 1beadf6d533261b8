package localdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stagePrefix names the scratch dirs initDataDir works in.
const stagePrefix = ".localdb-init-"

// lockDataDir takes an exclusive lock on dataDir for as long as the returned
// file stays open. Without it, a second server on the same dir would not
// fail fast but sit in InnoDB's lock retry loop for 100 seconds.
func lockDataDir(dataDir string) (*os.File, error) {
	path := filepath.Join(dataDir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("localdb: lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("localdb: data dir %s is in use by another private server (lock %s is held)", dataDir, path)
		}
		return nil, fmt.Errorf("localdb: lock %s: %w", path, err)
	}
	return f, nil
}

// removeStalePidFile refuses to start next to a live server on the same
// data dir (one whose owner died without stopping it, say) and removes the
// pid file of a dead one.
func removeStalePidFile(dataDir string, logw io.Writer) error {
	path := filepath.Join(dataDir, pidFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localdb: read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err == nil && pid > 0 && serverAlive(pid) {
		return fmt.Errorf("localdb: a server (pid %d) is still running on data dir %s; stop it first (kill %d)", pid, dataDir, pid)
	}
	fmt.Fprintf(logw, "removing stale pid file %s (pid %s is not running)\n", path, strings.TrimSpace(string(b)))
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("localdb: remove stale pid file: %w", err)
	}
	return nil
}

// serverAlive reports whether pid is a running MariaDB/MySQL server.
func serverAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A pid from an old pid file may since have been reused by an
	// unrelated process. Where /proc can tell, check the program name.
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return true
	}
	name := strings.TrimSpace(string(comm))
	return name == "mariadbd" || name == "mysqld"
}

// initialised reports whether dataDir already holds the system tables.
func initialised(dataDir string) bool {
	fi, err := os.Stat(filepath.Join(dataDir, "mysql"))
	return err == nil && fi.IsDir()
}

// initDataDir creates the system tables with a root account that has an
// empty password. It works in a scratch dir inside dataDir and moves the
// result into place with the `mysql` dir last, so an interrupted init never
// leaves a data dir that looks initialised but is not.
func initDataDir(ctx context.Context, bins binaries, dataDir string, logw io.Writer) error {
	// Leftovers of an init that was killed outright.
	if old, _ := filepath.Glob(filepath.Join(dataDir, stagePrefix+"*")); len(old) > 0 {
		for _, dir := range old {
			os.RemoveAll(dir)
		}
	}
	stage, err := os.MkdirTemp(dataDir, stagePrefix+"*")
	if err != nil {
		return fmt.Errorf("localdb: init data dir: %w", err)
	}
	defer os.RemoveAll(stage)

	bin, args, err := initCommand(ctx, bins, stage)
	if err != nil {
		return err
	}
	fmt.Fprintf(logw, "initialising data dir %s with %s\n", dataDir, filepath.Base(bin))
	began := time.Now()
	out := &tailWriter{max: 8 << 10}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("localdb: %s %s: %w\n%s", bin, strings.Join(args, " "), err, lastLines(out.String(), 30))
	}

	entries, err := os.ReadDir(stage)
	if err != nil {
		return fmt.Errorf("localdb: init data dir: %w", err)
	}
	var sawMySQL bool
	for _, e := range entries {
		if e.Name() == "mysql" {
			sawMySQL = true
			continue
		}
		if err := os.Rename(filepath.Join(stage, e.Name()), filepath.Join(dataDir, e.Name())); err != nil {
			return fmt.Errorf("localdb: move initialised data into place: %w", err)
		}
	}
	if !sawMySQL {
		return fmt.Errorf("localdb: %s succeeded but created no mysql system dir\n%s", bin, lastLines(out.String(), 30))
	}
	if err := os.Rename(filepath.Join(stage, "mysql"), filepath.Join(dataDir, "mysql")); err != nil {
		return fmt.Errorf("localdb: move initialised data into place: %w", err)
	}
	fmt.Fprintf(logw, "initialised data dir in %s\n", time.Since(began).Round(time.Millisecond))
	return nil
}

// initCommand returns the command that initialises dir. MariaDB uses its
// install script; Oracle MySQL 5.7+ initialises through the server itself.
func initCommand(ctx context.Context, bins binaries, dir string) (string, []string, error) {
	var args []string
	if !bins.mariaDB {
		args = []string{"--no-defaults", "--initialize-insecure", "--datadir=" + dir}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		return bins.server, args, nil
	}
	if bins.installer == "" {
		return "", nil, fmt.Errorf("localdb: %s found but no mariadb-install-db/mysql_install_db next to it; reinstall with sudo apt-get install -y mariadb-server", bins.server)
	}
	args = []string{"--no-defaults", "--datadir=" + dir}
	// Both options are newer than some still-deployed versions; ask the
	// script what it understands rather than guessing from versions.
	help, _ := exec.CommandContext(ctx, bins.installer, "--help").CombinedOutput()
	if strings.Contains(string(help), "--auth-root-authentication-method") {
		// "normal" gives root@localhost an empty password instead of the
		// unix_socket-only login that is the default since 10.4.
		args = append(args, "--auth-root-authentication-method=normal")
	}
	if strings.Contains(string(help), "--skip-test-db") {
		args = append(args, "--skip-test-db")
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	return bins.installer, args, nil
}

// writeInitFile (re)writes the SQL the server runs at every start, before
// it accepts connections. mariadb-install-db already creates
// root@127.0.0.1 on current versions, but other versions, MySQL and data
// dirs initialised by hand may only have root@localhost, which does not
// match TCP clients under --skip-name-resolve. Both statements are no-ops
// when the account already exists.
func writeInitFile(dataDir string) error {
	const sql = "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';\n" +
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n"
	if err := os.WriteFile(filepath.Join(dataDir, initFileName), []byte(sql), 0o600); err != nil {
		return fmt.Errorf("localdb: write init file: %w", err)
	}
	return nil
}
