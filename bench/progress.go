package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress shows what the run is doing on stderr: one line redrawn in place
// when stderr is a terminal, plain periodic lines otherwise (logs, CI, tests).
type progress struct {
	w   io.Writer
	tty bool
	mu  sync.Mutex
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// line prints one plain line.
func (p *progress) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintf(p.w, "bench: "+format+"\n", args...)
}

// phase shows a timed phase: its warm-up, then its measured window with the
// requests completed so far. stop ends the display with a summary line.
func (p *progress) phase(title string, warmup, d time.Duration, done *atomic.Int64) (stop func()) {
	start := time.Now()
	return p.show(title, func() (float64, string) {
		el := time.Since(start)
		if el < warmup {
			return 0, fmt.Sprintf("warm-up %.1fs", (warmup - el).Seconds())
		}
		m := min(el-warmup, d)
		n := done.Load()
		rate := 0.0
		if m > 0 {
			rate = float64(n) / m.Seconds()
		}
		return float64(m) / float64(d), fmt.Sprintf("%4.1fs/%.0fs  %d req  %.0f req/s", m.Seconds(), d.Seconds(), n, rate)
	}, func() string {
		m := min(max(time.Since(start)-warmup, 0), d)
		return fmt.Sprintf("%s: %d requests in %.1fs", title, done.Load(), m.Seconds())
	})
}

// count shows a phase that ends after total units of work.
func (p *progress) count(title string, total int64, done *atomic.Int64) (stop func()) {
	start := time.Now()
	return p.show(title, func() (float64, string) {
		n := done.Load()
		el := time.Since(start).Seconds()
		return float64(n) / float64(total), fmt.Sprintf("%d/%d  %.1fs  %.0f/s", n, total, el, float64(n)/max(el, 1e-9))
	}, func() string {
		return fmt.Sprintf("%s: %d/%d in %.1fs", title, done.Load(), total, time.Since(start).Seconds())
	})
}

func (p *progress) show(title string, status func() (float64, string), final func() string) (stop func()) {
	every := 200 * time.Millisecond
	if !p.tty {
		every = 2 * time.Second
	}
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			frac, text := status()
			p.mu.Lock()
			if p.tty {
				fmt.Fprintf(p.w, "\r\x1b[K%-34s %s %s", title, bar(frac, 24), text)
			} else {
				fmt.Fprintf(p.w, "bench: %s: %3.0f%% %s\n", title, 100*min(max(frac, 0), 1), text)
			}
			p.mu.Unlock()
		}
	}()
	return func() {
		close(quit)
		<-finished
		p.line("%s", final())
	}
}

func bar(frac float64, width int) string {
	n := int(min(max(frac, 0), 1) * float64(width))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
