package mysql

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
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
func (s *Store) ActivePublishableKeysByPrefix(ctx context.Context, prefix string) (_ []merchants.StoredKey, _ []merchants.Merchant, err error) {
	defer errs.Wrap(&err, "Store.ActivePublishableKeysByPrefix")
	defer errs.Wrap(&err, "Store.ActivePublishableKeysByPrefix")
	return s.activeKeys(ctx, publishableKeyQuery, prefix)
}

// AddPublishableKey implements merchants.BrowserAdminStore.
func (s *Store) AddPublishableKey(ctx context.Context, merchantID string, key merchants.APIKey, now time.Time) error {
	return s.addKey(ctx, "publishable_keys", merchantID, key, now)
}

// RevokePublishableKey implements merchants.BrowserAdminStore.
func (s *Store) RevokePublishableKey(ctx context.Context, merchantID, prefix string, now time.Time) (_ int, err error) {
	defer errs.Wrap(&err, "Store.RevokePublishableKey")
	defer errs.Wrap(&err, "Store.RevokePublishableKey")
	return s.revokeKey(ctx, "publishable_keys", merchantID, prefix, now)
}

// PublishableKeys implements merchants.BrowserAdminStore.
func (s *Store) PublishableKeys(ctx context.Context, merchantID string) (_ []merchants.StoredKey, err error) {
	defer errs.Wrap(&err, "Store.PublishableKeys")
	defer errs.Wrap(&err, "Store.PublishableKeys")
	return s.merchantKeys(ctx, publishableKeyQuery, merchantID)
}

// MerchantOrigins implements merchants.BrowserStore and merchants.BrowserAdminStore.
func (s *Store) MerchantOrigins(ctx context.Context, merchantID string) (_ []string, err error) {
	defer errs.Wrap(&err, "Store.MerchantOrigins")
	origins := []string{}
	if err := s.db.SelectContext(ctx, &origins, `SELECT origin FROM merchant_origins WHERE merchant_id = ? ORDER BY origin`, merchantID); err != nil {
		return nil, Classify(err)
	}
	return origins, nil
}

// AllowedOrigins implements merchants.BrowserStore: every origin some
// merchant allows, for CORS preflights (a preflight names no merchant).
// Each replica holds the list in memory and reads it again once per auth
// cache TTL, never once per request.
func (s *Store) AllowedOrigins(ctx context.Context) (_ []string, err error) {
	defer errs.Wrap(&err, "Store.AllowedOrigins")
	origins := []string{}
	if err := s.db.SelectContext(ctx, &origins, `SELECT DISTINCT origin FROM merchant_origins`); err != nil {
		return nil, Classify(err)
	}
	return origins, nil
}

// AddOrigin implements merchants.BrowserAdminStore. The primary key decides
// whether the origin was there: INSERT IGNORE counts only a new row.
func (s *Store) AddOrigin(ctx context.Context, merchantID, origin string, now time.Time) (_ bool, err error) {
	defer errs.Wrap(&err, "Store.AddOrigin")
	var added bool
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
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
		return false, err
	}
	return added, nil
}

// RemoveOrigin implements merchants.BrowserAdminStore.
func (s *Store) RemoveOrigin(ctx context.Context, merchantID, origin string) (_ bool, err error) {
	defer errs.Wrap(&err, "Store.RemoveOrigin")
	n, err := ExecRetry(ctx, s.db, `DELETE FROM merchant_origins WHERE merchant_id = ? AND origin = ?`, merchantID, origin)
	if err != nil {
		return false, err
	}
	return n > 0, nil
}
