// Command withdb runs a command against a private MariaDB server:
//
//	go run ./tests/withdb [-datadir DIR] [-v] -- CMD ARGS...
//
// Unless GATEWAY_TEST_DSN is already set, it starts a server with
// gateway/mysql/localdb, runs CMD with GATEWAY_TEST_DSN=root@tcp(127.0.0.1:PORT)/
// (no database: tests create their own), stops the server and exits with
// CMD's status. The server's data lives in a temporary directory that is
// removed afterwards, unless -datadir names one to keep.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"gateway/mysql/localdb"
)

const dsnVar = "GATEWAY_TEST_DSN"

// Exit statuses for withdb's own failures, as env(1) and friends use them.
const (
	exitFailure     = 125 // withdb itself failed
	exitCannotRun   = 126 // CMD exists but could not be run
	exitNotFound    = 127 // CMD not found
	exitSignalsBase = 128 // CMD killed by signal N exits 128+N, as in shells
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("withdb", flag.ContinueOnError)
	flags.SetOutput(stderr)
	dataDir := flags.String("datadir", "", "keep the server's data in `DIR` (default: a temporary directory, removed afterwards)")
	verbose := flags.Bool("v", false, "show the server's progress (install, init, start, stop)")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: withdb [-datadir DIR] [-v] -- CMD ARGS...")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if flags.NArg() == 0 {
		flags.Usage()
		return 2
	}

	// Catch signals from the start, so that an interrupt at any point
	// still reaches the cleanup below instead of killing us outright.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	cmd := exec.Command(flags.Arg(0), flags.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if cmd.Err != nil {
		// Don't start a server for a command that cannot run.
		return cannotRun(cmd.Err, stderr)
	}

	if getenv(dsnVar) != "" {
		return runChild(cmd, sigs, stderr)
	}

	dir := *dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "withdb-")
		if err != nil {
			fmt.Fprintf(stderr, "withdb: %v\n", err)
			return exitFailure
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	var progress io.Writer
	if *verbose {
		progress = stderr
	}
	srv, err := startServer(ctx, localdb.Options{DataDir: dir, Log: progress}, sigs)
	if err != nil {
		fmt.Fprintf(stderr, "withdb: %v\n", err)
		return exitFailure
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(stderr, "withdb: %v\n", err)
		}
	}()

	dsn := srv.DSN("")
	fmt.Fprintf(stderr, "withdb: private MariaDB on %s (data dir %s): %s=%s\n", srv.Addr(), dir, dsnVar, dsn)
	cmd.Env = append(os.Environ(), dsnVar+"="+dsn)
	return runChild(cmd, sigs, stderr)
}

// startServer starts the server, giving up if a signal arrives first.
func startServer(ctx context.Context, opts localdb.Options, sigs <-chan os.Signal) (*localdb.Server, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		srv *localdb.Server
		err error
	}
	done := make(chan result, 1)
	go func() {
		srv, err := localdb.Start(ctx, opts)
		done <- result{srv, err}
	}()
	select {
	case r := <-done:
		return r.srv, r.err
	case sig := <-sigs:
		cancel()
		if r := <-done; r.err == nil {
			// The start won the race against the cancellation.
			r.srv.Stop()
		}
		return nil, fmt.Errorf("interrupted by %v while starting the server", sig)
	}
}

// runChild runs cmd to completion, forwarding SIGINT and SIGTERM to it, and
// returns the exit status to pass on.
func runChild(cmd *exec.Cmd, sigs <-chan os.Signal, stderr io.Writer) int {
	if err := cmd.Start(); err != nil {
		return cannotRun(err, stderr)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			// The child decides how to react; we keep waiting for it so
			// the server is only stopped once nothing uses it any more.
			cmd.Process.Signal(sig)
		case err := <-waited:
			return exitStatus(err, stderr)
		}
	}
}

func cannotRun(err error, stderr io.Writer) int {
	fmt.Fprintf(stderr, "withdb: %v\n", err)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

func exitStatus(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		fmt.Fprintf(stderr, "withdb: %v\n", err)
		return exitFailure
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalsBase + int(ws.Signal())
	}
	return exitErr.ExitCode()
}
