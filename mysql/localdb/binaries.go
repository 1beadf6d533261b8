package localdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrCannotInstall marks missing binaries that we lack the rights to
// install; the error wrapping it names the command to run. Tests skip on it.
var ErrCannotInstall = errors.New("localdb: installing the missing packages needs root")

// binaries are the programs a private server needs.
type binaries struct {
	server    string // mariadbd or mysqld
	installer string // mariadb-install-db or mysql_install_db; may be empty for Oracle MySQL
	mariaDB   bool   // false for Oracle MySQL, which is initialised and configured differently
}

// FindBinaries locates the server (mariadbd or mysqld) and the data
// directory installer (mariadb-install-db or mysql_install_db) in PATH,
// /usr/sbin, /usr/local/mysql/bin and /usr/bin.
func FindBinaries() (server, installDB string, err error) {
	server = findBinary("mariadbd", "mysqld")
	installDB = findBinary("mariadb-install-db", "mysql_install_db")
	var missing []string
	if server == "" {
		missing = append(missing, "mariadbd/mysqld")
	}
	if installDB == "" {
		missing = append(missing, "mariadb-install-db/mysql_install_db")
	}
	if len(missing) > 0 {
		return server, installDB, fmt.Errorf("localdb: %s not found in PATH, %s",
			strings.Join(missing, " and "), strings.Join(searchDirs(), ", "))
	}
	return server, installDB, nil
}

// searchDirs are where distributions and the MySQL tarball put servers,
// some of which (sbin) are not in an unprivileged user's PATH.
func searchDirs() []string {
	return []string{"/usr/sbin", "/usr/local/mysql/bin", "/usr/bin"}
}

// findBinary returns the first of names found, preferring earlier names
// over earlier locations, or "".
func findBinary(names ...string) string {
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range searchDirs() {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	return ""
}

// ensureBinaries finds the binaries, installing MariaDB with apt-get when
// there is no server at all. A machine that has a server but no installer is
// left alone: installing mariadb-server next to Oracle MySQL would make apt
// remove MySQL, and MySQL can initialise a data dir by itself.
func ensureBinaries(ctx context.Context, logw io.Writer, install bool) (binaries, error) {
	server, installer, err := FindBinaries()
	if server == "" && !install {
		return binaries{}, fmt.Errorf("%w; install it with: sudo apt-get install -y mariadb-server (make test and make run do that for you)", err)
	}
	if server == "" {
		fmt.Fprintf(logw, "%v\n", err)
		if err := aptInstall(ctx, logw, "mariadb-server"); err != nil {
			return binaries{}, err
		}
		server, installer, err = FindBinaries()
		if server == "" {
			return binaries{}, fmt.Errorf("%w (even after installing mariadb-server)", err)
		}
	}
	maria, err := isMariaDB(ctx, server)
	if err != nil {
		return binaries{}, err
	}
	return binaries{server: server, installer: installer, mariaDB: maria}, nil
}

// aptInstall installs pkgs with apt-get, as root or through passwordless
// sudo. A package's own system service may get started by the install;
// private servers never use it.
func aptInstall(ctx context.Context, logw io.Writer, pkgs ...string) error {
	list := strings.Join(pkgs, " ")
	var prefix []string
	if os.Geteuid() != 0 {
		if exec.CommandContext(ctx, "sudo", "-n", "true").Run() != nil {
			return fmt.Errorf("%w: install them with sudo apt-get install -y %s", ErrCannotInstall, list)
		}
		prefix = []string{"sudo", "-n"}
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("localdb: apt-get is not available: install %s (or your distribution's equivalent) with your package manager", list)
	}
	fmt.Fprintf(logw, "installing %s with apt-get…\n", list)
	steps := [][]string{
		{"apt-get", "update"},
		// env rather than cmd.Env: sudo would scrub the variable.
		// The lock timeout lets concurrent test binaries queue up instead
		// of failing on dpkg's lock.
		append([]string{"env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "--no-install-recommends",
			"-o", "DPkg::Lock::Timeout=300"}, pkgs...),
	}
	for _, step := range steps {
		argv := append(append([]string(nil), prefix...), step...)
		fmt.Fprintf(logw, "running: %s\n", strings.Join(argv, " "))
		out := &tailWriter{max: 4 << 10}
		w := io.MultiWriter(logw, out)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdout = w
		cmd.Stderr = w
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("localdb: %s: %w\n%s", strings.Join(argv, " "), err, lastLines(out.String(), 20))
		}
	}
	return nil
}

// isMariaDB tells MariaDB from Oracle MySQL.
func isMariaDB(ctx context.Context, server string) (bool, error) {
	out, err := exec.CommandContext(ctx, server, "--version").CombinedOutput()
	if ctx.Err() != nil {
		return false, fmt.Errorf("localdb: %s --version: %w", server, ctx.Err())
	}
	if err != nil {
		return false, fmt.Errorf("localdb: %s --version: %w: %s", server, err, strings.TrimSpace(string(out)))
	}
	return strings.Contains(string(out), "MariaDB"), nil
}
