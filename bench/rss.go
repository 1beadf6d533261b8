package main

import (
	"bufio"
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
)

// rssMeter reads the process's peak resident set size. On Linux the peak
// (VmHWM) can be reset through /proc/self/clear_refs, which gives each
// phase its own peak; elsewhere every reading is the peak of the whole run.
type rssMeter struct {
	mu   sync.Mutex
	max  int64 // the highest peak seen before any reset
	perr error // why resetting is not possible, once known
}

// reset starts a new peak, remembering the old one for overall. It first
// returns the garbage of earlier phases to the system, so that a phase's
// peak is its own.
func (m *rssMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.max = max(m.max, peakRSS())
	debug.FreeOSMemory()
	if m.perr != nil {
		return
	}
	m.perr = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peak is the peak RSS since the last reset (or since the start).
func (m *rssMeter) peak() int64 {
	p := peakRSS()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.max = max(m.max, p)
	return p
}

// overall is the peak of the whole run so far.
func (m *rssMeter) overall() int64 {
	m.peak()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max
}

// peakRSS is VmHWM from /proc/self/status, or getrusage's maxrss.
func peakRSS() int64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := bytes.Fields(sc.Bytes())
			if len(f) >= 2 && string(f[0]) == "VmHWM:" {
				if kb, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		return int64(ru.Maxrss) << 10 // kilobytes on Linux
	}
	return 0
}
