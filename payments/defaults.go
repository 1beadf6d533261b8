package payments

import "time"

// Defaults of the payment flow: the one place they are written. The
// configuration, the reconciler and the benchmarks start from these.
const (
	// DefaultLease is how long a worker owns an unfinished key.
	DefaultLease = 30 * time.Second
	// DefaultPSPTimeout bounds each PSP call; the lease must outlast it.
	DefaultPSPTimeout = 10 * time.Second
	// DefaultInFlightWait bounds how long a duplicate waits for the first request.
	DefaultInFlightWait = 2 * time.Second
	// DefaultRetention is how long a completed key replays its answer.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultEventRetention is how long an event stays listed by GET /events
	// before the purge deletes it.
	DefaultEventRetention = 30 * 24 * time.Hour
	// DefaultReplayCacheBytes bounds the final answers a replica keeps for
	// replays (one merchant may hold a quarter of it).
	DefaultReplayCacheBytes = 32 << 20
	// DefaultAuthorizationValidity is how long an authorization is held
	// capturable when its PSP's answer does not say (card networks hold an
	// online authorization for 7 days at least).
	DefaultAuthorizationValidity = 7 * 24 * time.Hour
	// DefaultReplayCacheTTL is how long a replica replays an answer from
	// memory before it reads the stored one again: the bound on how long
	// an answer rewritten elsewhere (an operator's forced correction, a
	// PSP's contradiction sending the payment to review) may still be
	// replayed as it was.
	DefaultReplayCacheTTL = time.Minute
	// ReviewFirstLook is how soon after a payment enters review the review
	// queue first asks its PSP again.
	ReviewFirstLook = 5 * time.Minute
	// RefundFirstCheck is how soon after the PSP accepted a refund it will
	// finish later (pending) the refund queue first asks about it.
	RefundFirstCheck = time.Minute
	// DefaultConfirmExpiry is how long a payment created with "confirm":
	// false waits for its confirmation before it is canceled.
	DefaultConfirmExpiry = time.Hour
	// ActionFirstLook is how soon after a payment started waiting for its
	// customer (requires_action) the reconciler first asks its PSP about it.
	ActionFirstLook = time.Minute
	// DefaultWriteTimeout bounds a write made after a PSP call, whatever the
	// request's own deadline: the PSP's answer must reach the database even
	// when the client has gone.
	DefaultWriteTimeout = 5 * time.Second
)
