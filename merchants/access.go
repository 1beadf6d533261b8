package merchants

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gateway/errs"
)

// BrowserAdminStore is what the administration of browser access reads and writes.
type BrowserAdminStore interface {
	// AddPublishableKey stores a publishable key (only its hash) for an
	// existing merchant; errs.ErrNotFound for an unknown merchant.
	AddPublishableKey(ctx context.Context, merchantID string, key APIKey, now time.Time) error
	// RevokePublishableKey revokes the merchant's active publishable keys
	// with a prefix and reports how many.
	RevokePublishableKey(ctx context.Context, merchantID, prefix string, now time.Time) (int, error)
	// PublishableKeys lists a merchant's publishable keys, revoked ones included.
	PublishableKeys(ctx context.Context, merchantID string) ([]StoredKey, error)
	// AddOrigin lets a merchant's pages be served from origin (normalized);
	// it reports false when it was allowed already. errs.ErrNotFound for an
	// unknown merchant.
	AddOrigin(ctx context.Context, merchantID, origin string, now time.Time) (bool, error)
	// RemoveOrigin takes origin off the merchant's list and reports whether it was there.
	RemoveOrigin(ctx context.Context, merchantID, origin string) (bool, error)
	// MerchantOrigins lists the origins a merchant allows, in order.
	MerchantOrigins(ctx context.Context, merchantID string) ([]string, error)
	// Merchant reads one merchant; errs.ErrNotFound when there is none.
	Merchant(ctx context.Context, id string) (Merchant, error)
}

// BrowserAccess is ops' administration of what browsers may do for a
// merchant: its publishable keys and the origins its checkout pages are
// served from. Replicas see a change within their auth cache's TTL.
type BrowserAccess struct {
	store BrowserAdminStore
	now   func() time.Time
}

// NewBrowserAccess returns a BrowserAccess over store; now stamps keys and
// origins (time.Now when nil).
func NewBrowserAccess(store BrowserAdminStore, now func() time.Time) *BrowserAccess {
	if now == nil {
		now = time.Now
	}
	return &BrowserAccess{store: store, now: now}
}

func (b *BrowserAccess) stamp() time.Time { return b.now().UTC().Truncate(time.Microsecond) }

// CreatePublishableKey mints a publishable key for a merchant; several may
// be active at once, for rotation. errs.CodeNotFound for an unknown merchant.
func (b *BrowserAccess) CreatePublishableKey(ctx context.Context, merchantID string) (APIKey, error) {
	key, err := NewPublishableKey()
	if err != nil {
		return APIKey{}, errs.Internal(err)
	}
	if err := b.store.AddPublishableKey(ctx, merchantID, key, b.stamp()); err != nil {
		return APIKey{}, merchantErr(err, merchantID)
	}
	return key, nil
}

// RevokePublishableKey revokes the merchant's active publishable key with
// the given visible prefix; errs.CodeNotFound when there is none.
func (b *BrowserAccess) RevokePublishableKey(ctx context.Context, merchantID, prefix string) error {
	n, err := b.store.RevokePublishableKey(ctx, merchantID, prefix, b.stamp())
	if err != nil {
		return errs.Internal(err)
	}
	if n == 0 {
		return errs.Errorf(errs.CodeNotFound, "merchant %s has no active publishable key with prefix %s", merchantID, prefix)
	}
	return nil
}

// PublishableKeys lists a merchant's publishable keys: prefixes and dates;
// errs.CodeNotFound for an unknown merchant.
func (b *BrowserAccess) PublishableKeys(ctx context.Context, merchantID string) ([]StoredKey, error) {
	keys, err := b.store.PublishableKeys(ctx, merchantID)
	if err != nil {
		return nil, errs.Internal(err)
	}
	if len(keys) == 0 {
		return nil, known(ctx, b.store, merchantID)
	}
	return keys, nil
}

// AllowOrigin lets browsers on origin confirm the merchant's payments; it
// returns the origin as stored (normalized) and whether it was new.
// errs.CodeInvalid for something that is not an origin, errs.CodeNotFound for an
// unknown merchant.
func (b *BrowserAccess) AllowOrigin(ctx context.Context, merchantID, origin string) (string, bool, error) {
	norm, err := NormalizeOrigin(origin)
	if err != nil {
		return "", false, err
	}
	added, err := b.store.AddOrigin(ctx, merchantID, norm, b.stamp())
	if err != nil {
		return "", false, merchantErr(err, merchantID)
	}
	return norm, added, nil
}

// DisallowOrigin takes origin off the merchant's list; errs.CodeNotFound when it
// was not there.
func (b *BrowserAccess) DisallowOrigin(ctx context.Context, merchantID, origin string) (string, error) {
	norm, err := NormalizeOrigin(origin)
	if err != nil {
		return "", err
	}
	removed, err := b.store.RemoveOrigin(ctx, merchantID, norm)
	if err != nil {
		return "", errs.Internal(err)
	}
	if !removed {
		return "", errs.Errorf(errs.CodeNotFound, "merchant %s does not allow %s", merchantID, norm)
	}
	return norm, nil
}

// Origins lists the origins a merchant allows; errs.CodeNotFound for an
// unknown merchant.
func (b *BrowserAccess) Origins(ctx context.Context, merchantID string) ([]string, error) {
	origins, err := b.store.MerchantOrigins(ctx, merchantID)
	if err != nil {
		return nil, errs.Internal(err)
	}
	if len(origins) == 0 {
		return nil, known(ctx, b.store, merchantID)
	}
	return origins, nil
}

// merchantErr names an unknown merchant; any other failure is internal.
func merchantErr(err error, merchantID string) error {
	if errors.Is(err, errs.ErrNotFound) {
		return errs.Errorf(errs.CodeNotFound, "no merchant %s", merchantID)
	}
	return errs.Internal(fmt.Errorf("merchant %s: %w", merchantID, err))
}
