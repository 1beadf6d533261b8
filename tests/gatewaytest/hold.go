package gatewaytest

import (
	"context"
	"sync"
	"time"

	"gateway/psp"
)

// ChargeHold makes the PSP hold charges until released: a request stays in
// flight while a test acts.
type ChargeHold struct {
	mu      sync.Mutex
	held    chan struct{} // closed to release; nil when charges pass
	arrived chan struct{} // closed when a held charge arrives
}

// Set holds the charges from now on.
func (h *ChargeHold) Set() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held, h.arrived = make(chan struct{}), make(chan struct{})
}

// Release lets the held charges, and every later one, through.
func (h *ChargeHold) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil {
		close(h.held)
		h.held = nil
	}
}

// Arrived is closed once a charge is held (nil when nothing is set).
func (h *ChargeHold) Arrived() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.arrived
}

// WaitArrival waits up to d for a held charge.
func (h *ChargeHold) WaitArrival(d time.Duration) bool {
	arrived := h.Arrived()
	if arrived == nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-arrived:
		return true
	case <-t.C:
		return false
	}
}

// wait is the PSP's charge hook.
func (h *ChargeHold) wait(ctx context.Context, _ psp.ChargeRequest) {
	h.mu.Lock()
	held, arrived := h.held, h.arrived
	if held != nil {
		select {
		case <-arrived:
		default:
			close(arrived)
		}
	}
	h.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
		}
	}
}
