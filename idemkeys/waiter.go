package idemkeys

import "sync"

// Waiter wakes the duplicates of a key waiting in this process as soon as the
// key completes here, so that they need not poll the database for it, and
// knows which keys this process is working on: a duplicate of one of those
// waits to be woken and never polls. A key held by another replica is
// noticed by polling.
type Waiter struct {
	mu      sync.Mutex
	waiting map[Ref]*waitEntry
	working map[Ref]int
}

type waitEntry struct {
	ch      chan struct{}
	holders int
}

// NewWaiter returns an empty Waiter.
func NewWaiter() *Waiter {
	return &Waiter{waiting: make(map[Ref]*waitEntry), working: make(map[Ref]int)}
}

// Wait returns a channel closed by the next Notify for ref, and a function
// that must be called when the caller stops waiting (it frees the entry).
// Take the channel before reading the record, so that a completion between
// the read and the wait is not missed.
func (w *Waiter) Wait(ref Ref) (done <-chan struct{}, stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.waiting[ref]
	if !ok {
		e = &waitEntry{ch: make(chan struct{})}
		w.waiting[ref] = e
	}
	e.holders++
	var once sync.Once
	return e.ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			e.holders--
			if e.holders == 0 && w.waiting[ref] == e {
				delete(w.waiting, ref)
			}
		})
	}
}

// Begin records that this process works on ref until end is called; end
// also wakes ref's waiters, whatever the outcome.
func (w *Waiter) Begin(ref Ref) (end func()) {
	w.mu.Lock()
	w.working[ref]++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			if w.working[ref]--; w.working[ref] <= 0 {
				delete(w.working, ref)
			}
			w.mu.Unlock()
			w.Notify(ref)
		})
	}
}

// Working reports whether this process works on ref now.
func (w *Waiter) Working(ref Ref) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.working[ref] > 0
}

// Notify wakes everyone waiting on ref.
func (w *Waiter) Notify(ref Ref) {
	w.mu.Lock()
	e, ok := w.waiting[ref]
	delete(w.waiting, ref)
	w.mu.Unlock()
	if ok {
		close(e.ch)
	}
}

// Len is the number of keys with waiters, for tests and metrics.
func (w *Waiter) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting)
}
