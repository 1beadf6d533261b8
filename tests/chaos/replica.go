package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// replica is one `gateway serve` child process, restartable on the same
// address after a SIGKILL.
type replica struct {
	id      int
	addr    string // host:port it serves on
	bin     string
	env     []string
	logPath string

	mu   sync.Mutex
	proc *process // nil while not running

	starts, kills, freezes, exits int
}

// process is one run of a replica.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once reaped
	err  error         // Wait's result, read after done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (r *replica) url() string { return "http://" + r.addr }

// running returns the live process, or nil.
func (r *replica) running() *process {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.exited() {
		return nil
	}
	return r.proc
}

// spawn starts the process without waiting for it to be ready.
func (r *replica) spawn() (*process, error) {
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "{\"chaos\":\"start\",\"replica\":%d,\"time\":%q}\n", r.id, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(r.bin, "serve")
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the starting thread exits, so
		// this goroutine keeps its thread for the child's whole life.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		logf.Close()
		return nil, fmt.Errorf("replica %d: start: %w", r.id, err)
	}
	r.mu.Lock()
	r.proc = p
	r.starts++
	r.mu.Unlock()
	return p, nil
}

// ensureUp starts the replica unless it runs, and waits until /readyz
// answers 200. A process that exits (the database may be unreachable at
// start during an outage) is started again until ctx ends.
func (r *replica) ensureUp(ctx context.Context) error {
	for {
		p := r.running()
		if p == nil {
			var err error
			if p, err = r.spawn(); err != nil {
				return err
			}
		}
		err := waitReady(ctx, r.url(), p)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("replica %d on %s not ready: %w (log %s)", r.id, r.addr, err, r.logPath)
		}
		// It exited: start it again after a short pause.
		r.mu.Lock()
		r.exits++
		r.mu.Unlock()
		t := time.NewTimer(300 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

var errExited = errors.New("process exited")

// waitReady polls /readyz until it answers 200, the process exits, or ctx ends.
func waitReady(ctx context.Context, base string, p *process) error {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if res, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w: %v", errExited, p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// kill sends SIGKILL and waits for the process to be reaped. It reports
// whether a process was killed.
func (r *replica) kill() bool {
	p := r.running()
	if p == nil {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	r.mu.Lock()
	r.kills++
	r.mu.Unlock()
	return true
}

// freeze stops the running process (SIGSTOP) and returns a function that
// continues that same process; nil when nothing runs.
func (r *replica) freeze() (thaw func()) {
	p := r.running()
	if p == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil
	}
	r.mu.Lock()
	r.freezes++
	r.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }) }
}

// thawAll continues the running process, whatever froze it.
func (r *replica) thaw() {
	if p := r.running(); p != nil {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// stop ends the replica gracefully (SIGTERM), or with SIGKILL after timeout.
func (r *replica) stop(timeout time.Duration) {
	p := r.running()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}
