package merchants

import "time"

// Defaults of authentication.
const (
	// DefaultAuthCacheTTL is how long a replica trusts a verified API key
	// (or publishable key, or a merchant's browser origins, or the list of
	// every allowed origin) without a database read: the bound within which
	// a revocation reaches every replica. One read per active key per
	// replica every two seconds.
	DefaultAuthCacheTTL = 2 * time.Second
	// MaxAuthCacheTTL is the most that bound may be configured to.
	MaxAuthCacheTTL = 5 * time.Second
)
