// Package versions holds the API's dated versions and what each changed
// (docs/design.md §18). A merchant is pinned to the version current when
// it was created, a request may name another (Gateway-Version), and every
// answer says the version it is rendered in. The gateway renders every
// object in the latest version and stores it so, stamped with it; a change
// is a small transform from an object at its version to the version before
// it, and an older version is the newer rendering taken back through every
// change after it, newest first. Transforms of a released version never
// change, so what was answered once is answered the same way again.
package versions

import (
	"context"
	"fmt"
	"slices"
)

// Version is a dated API version, YYYY-MM-DD.
type Version string

// The versions, oldest first.
const (
	// V20261201 is the API as it was first published.
	V20261201 Version = "2026-12-01"
	// V20261202: a refund's failure_code is named decline_code, as a
	// payment's is.
	V20261202 Version = "2026-12-02"
)

// All lists every version the gateway renders, oldest first.
var All = []Version{V20261201, V20261202}

// First is the oldest version: what a stored rendering without a stamp is
// in (stored before versions existed), and what merchants created before
// them are pinned to.
const First = V20261201

// Latest is the newest version: what new merchants are pinned to and what
// the gateway renders and stores.
const Latest = V20261202

// Header names the version of a request and of an answer.
const Header = "Gateway-Version"

// Parse reads a version the gateway renders.
func Parse(s string) (Version, error) {
	v := Version(s)
	if !slices.Contains(All, v) {
		return "", fmt.Errorf("%q is not an API version of this gateway (they are %v)", s, All)
	}
	return v, nil
}

// OrFirst is v, or First when v is empty (a rendering stored unstamped).
func OrFirst(v string) Version {
	if v == "" {
		return First
	}
	return Version(v)
}

type ctxKey struct{}

// NewContext returns ctx carrying the version its request is answered in.
func NewContext(ctx context.Context, v Version) context.Context {
	return context.WithValue(ctx, ctxKey{}, v)
}

// FromContext is the version ctx's request is answered in; Latest when it
// names none (work of no request: the reconciler, the CLI).
func FromContext(ctx context.Context) Version {
	if v, ok := ctx.Value(ctxKey{}).(Version); ok {
		return v
	}
	return Latest
}
