package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/merchants"
)

// The statements of browser checkout: merchants' publishable keys and the
// browser origins they allow (merchants.BrowserStore, merchants.BrowserAdminStore).

var (
	_ merchants.BrowserStore      = (*Store)(nil)
	_ merchants.BrowserAdminStore = (*Store)(nil)
)

const publishableKeyQuery = apiKeyColumns + `
FROM publishable_keys k JOIN merchants m ON m.id = k.merchant_id`

// ActivePublishableKeysByPrefix implements merchants.BrowserStore.
func (s *Store) ActivePublishableKeysByPrefix(ctx context.Context, prefix string) ([]merchants.StoredKey, []merchants.Merchant, error) {
	return s.activeKeys(ctx, "store.ActivePublishableKeysByPrefix", publishableKeyQuery, prefix)
}

// AddPublishableKey implements merchants.BrowserAdminStore.
func (s *Store) AddPublishableKey(ctx context.Context, merchantID string, key merchants.APIKey, now time.Time) error {
	return s.addKey(ctx, "publishable_keys", merchantID, key, now)
}

// RevokePublishableKey implements merchants.BrowserAdminStore.
func (s *Store) RevokePublishableKey(ctx context.Context, merchantID, prefix string, now time.Time) (int, error) {
	return s.revokeKey(ctx, "store.RevokePublishableKey", "publishable_keys", merchantID, prefix, now)
}

// PublishableKeys implements merchants.BrowserAdminStore.
func (s *Store) PublishableKeys(ctx context.Context, merchantID string) ([]merchants.StoredKey, error) {
	return s.merchantKeys(ctx, "store.PublishableKeys", publishableKeyQuery, merchantID)
}

// MerchantOrigins implements merchants.BrowserStore and merchants.BrowserAdminStore.
func (s *Store) MerchantOrigins(ctx context.Context, merchantID string) ([]string, error) {
	origins := []string{}
	if err := s.db.SelectContext(ctx, &origins, `SELECT origin FROM merchant_origins WHERE merchant_id = ? ORDER BY origin`, merchantID); err != nil {
		return nil, fmt.Errorf("store.MerchantOrigins: %w", Classify(err))
	}
	return origins, nil
}

// OriginAllowed implements merchants.BrowserStore: whether any merchant
// allows origin (a CORS preflight names no merchant).
func (s *Store) OriginAllowed(ctx context.Context, origin string) (bool, error) {
	var n int
	if err := s.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM merchant_origins WHERE origin = ? LIMIT 1`, origin); err != nil {
		return false, fmt.Errorf("store.OriginAllowed: %w", Classify(err))
	}
	return n > 0, nil
}

// AddOrigin implements merchants.BrowserAdminStore. The primary key decides
// whether the origin was there: INSERT IGNORE counts only a new row.
func (s *Store) AddOrigin(ctx context.Context, merchantID, origin string, now time.Time) (bool, error) {
	var added bool
	err := Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if err := lockMerchant(ctx, tx, merchantID); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO merchant_origins (merchant_id, origin, created_at) VALUES (?, ?, ?)`,
			merchantID, origin, now)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		added = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store.AddOrigin: %w", err)
	}
	return added, nil
}

// RemoveOrigin implements merchants.BrowserAdminStore.
func (s *Store) RemoveOrigin(ctx context.Context, merchantID, origin string) (bool, error) {
	n, err := ExecRetry(ctx, s.db, `DELETE FROM merchant_origins WHERE merchant_id = ? AND origin = ?`, merchantID, origin)
	if err != nil {
		return false, fmt.Errorf("store.RemoveOrigin: %w", err)
	}
	return n > 0, nil
}
