package webhooks

import "time"

// Defaults of webhook delivery: the one place they are written. The
// configuration and the benchmarks start from these.
const (
	// DefaultTimeout bounds one delivery attempt: connect, send, answer.
	DefaultTimeout = 10 * time.Second
	// DefaultConcurrency is how many attempts to one endpoint one replica
	// has in flight at most.
	DefaultConcurrency = 4
	// DefaultInterval is how often a dispatcher looks for due work besides
	// the moments a finished attempt lets it.
	DefaultInterval = time.Second
	// DefaultBackoffBase is the wait after a first failed attempt; it
	// doubles per attempt, up to DefaultBackoffMax, each wait drawn at
	// random between its half and its whole (jitter).
	DefaultBackoffBase = 30 * time.Second
	DefaultBackoffMax  = 6 * time.Hour
	// DefaultMaxAge is how long after its creation a delivery is retried
	// before it is marked failed.
	DefaultMaxAge = 72 * time.Hour
	// DefaultDisableAfter is how long an endpoint may fail continuously
	// before it is disabled.
	DefaultDisableAfter = 72 * time.Hour
	// DefaultRotationGrace is how long a rotated-out secret still signs.
	DefaultRotationGrace = 24 * time.Hour
	// MaxRotationGrace bounds a grace period asked for.
	MaxRotationGrace = 7 * 24 * time.Hour
	// DefaultFanOutBatch is how many events one fan-out transaction claims.
	DefaultFanOutBatch = 200
	// DefaultMaxEndpoints is how many endpoints with due deliveries one look
	// starts workers for.
	DefaultMaxEndpoints = 500
)
