package merchants

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gateway/errs"
	"gateway/versions"
)

// AdminStore is what the administration of merchants reads and writes.
type AdminStore interface {
	// CreateMerchant stores m with its first API key (only the hash).
	CreateMerchant(ctx context.Context, m Merchant, key APIKey) error
	// AddAPIKey stores another key for an existing merchant; errs.ErrNotFound for an unknown merchant.
	AddAPIKey(ctx context.Context, merchantID string, key APIKey, now time.Time) error
	// RevokeAPIKey revokes the merchant's active keys with a prefix and reports how many.
	RevokeAPIKey(ctx context.Context, merchantID, prefix string, now time.Time) (int, error)
	// APIKeys lists a merchant's keys, revoked ones included.
	APIKeys(ctx context.Context, merchantID string) ([]StoredKey, error)
	// Merchants lists every merchant with its key counts, oldest first.
	Merchants(ctx context.Context) ([]MerchantSummary, error)
	// Merchant reads one merchant; errs.ErrNotFound when there is none.
	Merchant(ctx context.Context, id string) (Merchant, error)
	// SetMerchantAPIVersion pins a merchant to an API version;
	// errs.ErrNotFound for an unknown merchant.
	SetMerchantAPIVersion(ctx context.Context, merchantID, version string) error
}

// Admin is ops' administration of merchants and their secret API keys.
type Admin struct {
	store AdminStore
	now   func() time.Time
}

// NewAdmin returns an Admin over store; now stamps merchants and keys
// (time.Now when nil).
func NewAdmin(store AdminStore, now func() time.Time) *Admin {
	if now == nil {
		now = time.Now
	}
	return &Admin{store: store, now: now}
}

// CreateMerchant validates name, mints the merchant and its first API key,
// and stores both; the plaintext key in the result is shown once.
func (a *Admin) CreateMerchant(ctx context.Context, name string) (Merchant, APIKey, error) {
	m, key, err := NewMerchant(name, a.now())
	if err != nil {
		return Merchant{}, APIKey{}, err
	}
	if err := a.store.CreateMerchant(ctx, m, key); err != nil {
		return Merchant{}, APIKey{}, errs.Internal(fmt.Errorf("create merchant: %w", err))
	}
	return m, key, nil
}

// Merchant reads one merchant.
func (a *Admin) Merchant(ctx context.Context, id string) (Merchant, error) {
	m, err := a.store.Merchant(ctx, id)
	if errors.Is(err, errs.ErrNotFound) {
		return Merchant{}, errs.Errorf(errs.CodeNotFound, "no merchant %s", id)
	}
	if err != nil {
		return Merchant{}, errs.Internal(err)
	}
	return m, nil
}

// SetAPIVersion pins a merchant to an API version: its requests that name
// none are answered in it from now on (after the API key caches' TTL on
// every replica). Its webhook endpoints keep their own versions.
func (a *Admin) SetAPIVersion(ctx context.Context, merchantID, version string) (Merchant, error) {
	v, err := versions.Parse(version)
	if err != nil {
		return Merchant{}, errs.Errorf(errs.CodeInvalid, "%v", err)
	}
	if err := a.store.SetMerchantAPIVersion(ctx, merchantID, string(v)); err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return Merchant{}, errs.Errorf(errs.CodeNotFound, "no merchant %s", merchantID)
		}
		return Merchant{}, errs.Internal(fmt.Errorf("set the API version: %w", err))
	}
	return a.store.Merchant(ctx, merchantID)
}

// CreateAPIKey mints another key for a merchant, for rotation: several keys
// may be active at once. The plaintext in the result is shown once.
func (a *Admin) CreateAPIKey(ctx context.Context, merchantID string) (APIKey, error) {
	key, err := NewAPIKey()
	if err != nil {
		return APIKey{}, errs.Internal(err)
	}
	err = a.store.AddAPIKey(ctx, merchantID, key, a.now().UTC().Truncate(time.Microsecond))
	if errors.Is(err, errs.ErrNotFound) {
		return APIKey{}, errs.Errorf(errs.CodeNotFound, "no merchant %s", merchantID)
	}
	if err != nil {
		return APIKey{}, errs.Internal(err)
	}
	return key, nil
}

// RevokeAPIKey revokes the merchant's active key with the given visible prefix.
func (a *Admin) RevokeAPIKey(ctx context.Context, merchantID, prefix string) error {
	n, err := a.store.RevokeAPIKey(ctx, merchantID, prefix, a.now().UTC().Truncate(time.Microsecond))
	if err != nil {
		return errs.Internal(err)
	}
	if n == 0 {
		return errs.Errorf(errs.CodeNotFound, "merchant %s has no active key with prefix %s", merchantID, prefix)
	}
	return nil
}

// APIKeys lists a merchant's keys (prefixes and dates, never secrets);
// errs.CodeNotFound for an unknown merchant.
func (a *Admin) APIKeys(ctx context.Context, merchantID string) ([]StoredKey, error) {
	keys, err := a.store.APIKeys(ctx, merchantID)
	if err != nil {
		return nil, errs.Internal(fmt.Errorf("list keys: %w", err))
	}
	if len(keys) == 0 {
		// Every merchant is created with a key: none says there is no merchant.
		return nil, known(ctx, a.store, merchantID)
	}
	return keys, nil
}

// known is nil for an existing merchant, errs.CodeNotFound otherwise.
func known(ctx context.Context, store interface {
	Merchant(context.Context, string) (Merchant, error)
}, merchantID string) error {
	_, err := store.Merchant(ctx, merchantID)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return errs.Errorf(errs.CodeNotFound, "no merchant %s", merchantID)
	case err != nil:
		return errs.Internal(err)
	}
	return nil
}

// MerchantSummary is a merchant as ops list it.
type MerchantSummary struct {
	Merchant
	ActiveKeys, RevokedKeys int
}

// Merchants lists every merchant with its key counts.
func (a *Admin) Merchants(ctx context.Context) ([]MerchantSummary, error) {
	ms, err := a.store.Merchants(ctx)
	if err != nil {
		return nil, errs.Internal(fmt.Errorf("list merchants: %w", err))
	}
	return ms, nil
}
