package idemkeys_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"gateway/idemkeys"
)

var (
	refA = idemkeys.Ref{MerchantID: "mer_1", Endpoint: "POST /payments", Key: "k1"}
	// refB differs from refA only in the merchant, refC only in the key's case.
	refB = idemkeys.Ref{MerchantID: "mer_2", Endpoint: "POST /payments", Key: "k1"}
	refC = idemkeys.Ref{MerchantID: "mer_1", Endpoint: "POST /payments", Key: "K1"}
)

func TestWaiterNotifyWakesAllWaitersOfRef(t *testing.T) {
	w := idemkeys.NewWaiter()
	var chans []<-chan struct{}
	var stops []func()
	for range 5 {
		ch, stop := w.Wait(refA)
		chans = append(chans, ch)
		stops = append(stops, stop)
	}
	otherB, stopB := w.Wait(refB)
	otherC, stopC := w.Wait(refC)
	if got := w.Len(); got != 3 {
		t.Fatalf("Len = %d with waiters on 3 refs, want 3", got)
	}

	w.Notify(refA)

	for i, ch := range chans {
		mustBeClosed(t, ch, fmt.Sprintf("waiter %d of refA", i))
	}
	mustBeOpen(t, otherB, "waiter of refB (other merchant)")
	mustBeOpen(t, otherC, "waiter of refC (key differs in case)")
	if got := w.Len(); got != 2 {
		t.Errorf("Len after Notify(refA) = %d, want 2", got)
	}
	for _, stop := range stops {
		stop()
	}
	if got := w.Len(); got != 2 {
		t.Errorf("Len after refA's waiters stopped = %d, want 2", got)
	}
	stopB()
	stopC()
	if got := w.Len(); got != 0 {
		t.Errorf("Len after every waiter stopped = %d, want 0", got)
	}
	// The entries are gone: a later Notify must not wake these channels twice
	// (closing a closed channel would panic) nor reach the stopped waiters.
	w.Notify(refB)
	mustBeOpen(t, otherB, "stopped waiter of refB")
}

func TestWaiterStopFreesEntries(t *testing.T) {
	w := idemkeys.NewWaiter()
	if got := w.Len(); got != 0 {
		t.Fatalf("Len of a new Waiter = %d, want 0", got)
	}
	_, stop1 := w.Wait(refA)
	_, stop2 := w.Wait(refA)
	if got := w.Len(); got != 1 {
		t.Fatalf("Len with two waiters on one ref = %d, want 1", got)
	}
	stop1()
	if got := w.Len(); got != 1 {
		t.Errorf("Len after one of two waiters stopped = %d, want 1", got)
	}
	stop2()
	if got := w.Len(); got != 0 {
		t.Errorf("Len after both stopped = %d, want 0", got)
	}
}

func TestWaiterStopIsIdempotent(t *testing.T) {
	w := idemkeys.NewWaiter()
	_, stop1 := w.Wait(refA)
	ch2, stop2 := w.Wait(refA)
	// A second stop by the same waiter must not count as the other waiter's.
	stop1()
	stop1()
	if got := w.Len(); got != 1 {
		t.Fatalf("Len after stopping one waiter twice = %d, want 1 (the other still waits)", got)
	}
	w.Notify(refA)
	mustBeClosed(t, ch2, "remaining waiter")
	stop2()
	stop2()
	if got := w.Len(); got != 0 {
		t.Errorf("Len = %d, want 0", got)
	}
}

func TestWaiterNotifyWithoutWaitersIsNoOp(t *testing.T) {
	w := idemkeys.NewWaiter()
	w.Notify(refA)
	w.Notify(refA)
	if got := w.Len(); got != 0 {
		t.Errorf("Len = %d, want 0", got)
	}
	// Notify on a ref with waiters twice in a row: the second finds nothing.
	ch, stop := w.Wait(refA)
	defer stop()
	w.Notify(refA)
	w.Notify(refA)
	mustBeClosed(t, ch, "waiter")
}

func TestWaiterRegisteredAfterNotifyWaitsForNext(t *testing.T) {
	w := idemkeys.NewWaiter()
	early, stopEarly := w.Wait(refA)
	w.Notify(refA)
	mustBeClosed(t, early, "waiter registered before Notify")

	late, stopLate := w.Wait(refA)
	mustBeOpen(t, late, "waiter registered after Notify")
	if late == early {
		t.Fatal("a waiter registered after Notify got the already closed channel")
	}

	// The early waiter stops only now: it must not free the late waiter's entry.
	stopEarly()
	if got := w.Len(); got != 1 {
		t.Fatalf("Len after the early waiter stopped = %d, want 1 (the late waiter's entry)", got)
	}
	mustBeOpen(t, late, "waiter registered after Notify")

	w.Notify(refA)
	mustBeClosed(t, late, "waiter registered after the first Notify")
	stopLate()
	if got := w.Len(); got != 0 {
		t.Errorf("Len = %d, want 0", got)
	}
}

// TestWaiterConcurrent registers many waiters on several refs from many
// goroutines, wakes them once all are registered, and checks that each was
// woken by its own ref and every entry is freed.
func TestWaiterConcurrent(t *testing.T) {
	const refs, perRef = 8, 50
	w := idemkeys.NewWaiter()
	ref := func(i int) idemkeys.Ref {
		return idemkeys.Ref{MerchantID: "mer", Endpoint: "POST /payments", Key: fmt.Sprintf("key-%d", i)}
	}

	var registered, finished sync.WaitGroup
	woken := make([][]chan struct{}, refs) // woken[r][j] is closed when waiter j of ref r wakes
	for r := range refs {
		woken[r] = make([]chan struct{}, perRef)
		for j := range perRef {
			woken[r][j] = make(chan struct{})
			registered.Add(1)
			finished.Add(1)
			go func() {
				defer finished.Done()
				done, stop := w.Wait(ref(r))
				defer stop()
				registered.Done()
				select {
				case <-done:
					close(woken[r][j])
				case <-t.Context().Done():
				}
			}()
		}
	}
	registered.Wait()
	if got := w.Len(); got != refs {
		t.Fatalf("Len with every waiter registered = %d, want %d", got, refs)
	}

	// Wake the even refs only, concurrently, then check that the odd ones still wait.
	var notifiers sync.WaitGroup
	for r := 0; r < refs; r += 2 {
		notifiers.Go(func() { w.Notify(ref(r)) })
	}
	notifiers.Wait()
	for r := range refs {
		for j := range perRef {
			if r%2 == 0 {
				mustBeClosedWithin(t, woken[r][j], fmt.Sprintf("waiter %d of ref %d", j, r))
			} else {
				mustBeOpen(t, woken[r][j], fmt.Sprintf("waiter %d of unnotified ref %d", j, r))
			}
		}
	}

	for r := 1; r < refs; r += 2 {
		notifiers.Go(func() { w.Notify(ref(r)) })
	}
	notifiers.Wait()
	finished.Wait()
	if got := w.Len(); got != 0 {
		t.Errorf("Len after every waiter woke and stopped = %d, want 0", got)
	}
}

// TestWaiterChurn races Wait, stop and Notify on a few shared refs; the race
// detector and the final Len are the assertions.
func TestWaiterChurn(t *testing.T) {
	const goroutines, rounds = 32, 200
	w := idemkeys.NewWaiter()
	refs := []idemkeys.Ref{refA, refB, refC}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range rounds {
				ref := refs[(g+i)%len(refs)]
				if g%4 == 0 {
					w.Notify(ref)
					continue
				}
				done, stop := w.Wait(ref)
				select {
				case <-done:
				default:
				}
				stop()
				if i%7 == 0 {
					stop() // a repeated stop must stay harmless under contention
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := w.Len(); got != 0 {
		t.Errorf("Len after all waiters stopped = %d, want 0", got)
	}
}

func mustBeClosed(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-ch:
	default:
		tb.Errorf("%s: channel not closed, want woken", what)
	}
}

// mustBeClosedWithin waits for a channel another goroutine closes; the
// timeout only turns a hang into a failure.
func mustBeClosedWithin(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		tb.Fatalf("%s: not woken", what)
	}
}

func mustBeOpen(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-ch:
		tb.Errorf("%s: channel closed, want still waiting", what)
	default:
	}
}
