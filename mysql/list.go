package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"gateway/errs"
	"gateway/listings"
	"gateway/payments"
)

// Listings page newest first by (created_at, id). Each is read on an index
// that holds its filter, the merchant and that order, so that a page reads
// its own rows and no others: payments_list and refunds_list (merchant_id,
// created_at, id) unfiltered, payments_status and refunds_status (status,
// merchant_id, created_at, id) by status, refunds_payment for one
// payment's refunds (a handful). A range on created_at and the cursor are
// ranges of the same index. Every read is bounded on the server by the
// request's deadline (readLimit): a listing the client gave up on stops.

// listIndex is the index a page of table for q is read on.
func listIndex(table string, q listings.Query) string {
	switch {
	case table == "refunds" && q.PaymentID != "":
		return "refunds_payment"
	case q.Status != "":
		return table + "_status"
	}
	return table + "_list"
}

// listFrame builds the WHERE and ORDER of a page of table for q: the cursor
// is turned into its (created_at, id) first, within the merchant's own rows.
func (s *Store) listFrame(ctx context.Context, table string, q listings.Query) (where string, args []any, order string, reverse bool, err error) {
	conds := []string{"merchant_id = ?"}
	args = []any{q.MerchantID}
	if q.PaymentID != "" {
		conds = append(conds, "payment_id = ?")
		args = append(args, q.PaymentID)
	}
	if q.Status != "" {
		conds = append(conds, "status = ?")
		args = append(args, q.Status)
	}
	if !q.CreatedFrom.IsZero() {
		conds = append(conds, "created_at >= ?")
		args = append(args, q.CreatedFrom)
	}
	if !q.CreatedBefore.IsZero() {
		conds = append(conds, "created_at < ?")
		args = append(args, q.CreatedBefore)
	}
	order = "created_at DESC, id DESC"
	if cursor := q.StartingAfter + q.EndingBefore; cursor != "" {
		// The cursor must be an object of this listing: a payment's
		// refunds page from one of that payment's refunds only.
		lookup, largs := `SELECT created_at FROM `+table+` WHERE merchant_id = ? AND id = ?`, []any{q.MerchantID, cursor}
		if q.PaymentID != "" {
			lookup, largs = lookup+` AND payment_id = ?`, append(largs, q.PaymentID)
		}
		var at time.Time
		err := s.reads.get(ctx, s.db, &at, lookup, largs...)
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil, "", false, listings.ErrCursorNotFound
		}
		if err != nil {
			return "", nil, "", false, err
		}
		if q.StartingAfter != "" {
			conds = append(conds, "(created_at < ? OR (created_at = ? AND id < ?))")
		} else {
			conds = append(conds, "(created_at > ? OR (created_at = ? AND id > ?))")
			order, reverse = "created_at ASC, id ASC", true
		}
		args = append(args, at, at, cursor)
	}
	return strings.Join(conds, " AND "), args, order, reverse, nil
}

// MerchantPayments implements listings.Store.
func (s *Store) MerchantPayments(ctx context.Context, q listings.Query) (_ listings.Page[payments.Payment], err error) {
	defer errs.Wrap(&err, "Store.MerchantPayments")
	where, args, order, reverse, err := s.listFrame(ctx, "payments", q)
	if err != nil {
		return listings.Page[payments.Payment]{}, err
	}
	var rows []paymentRow
	if err := s.reads.sel(ctx, s.db, &rows, `SELECT `+paymentColumns+` FROM payments FORCE INDEX (`+listIndex("payments", q)+`) WHERE `+where+
		` ORDER BY `+order+` LIMIT ?`, append(args, q.Limit+1)...); err != nil {
		return listings.Page[payments.Payment]{}, err
	}
	page := listings.Page[payments.Payment]{HasMore: len(rows) > q.Limit}
	rows = rows[:min(len(rows), q.Limit)]
	for _, r := range rows {
		p, err := r.toDomain()
		if err != nil {
			return listings.Page[payments.Payment]{}, err
		}
		page.Items = append(page.Items, p)
	}
	if reverse {
		reverseSlice(page.Items)
	}
	return page, nil
}

// MerchantRefunds implements listings.Store.
func (s *Store) MerchantRefunds(ctx context.Context, q listings.Query) (_ listings.Page[payments.Refund], err error) {
	defer errs.Wrap(&err, "Store.MerchantRefunds")
	if q.PaymentID != "" {
		var n int
		if err := s.reads.get(ctx, s.db, &n, `SELECT COUNT(*) FROM payments WHERE merchant_id = ? AND id = ?`, q.MerchantID, q.PaymentID); err != nil {
			return listings.Page[payments.Refund]{}, err
		}
		if n == 0 {
			return listings.Page[payments.Refund]{}, errs.ErrNotFound
		}
	}
	where, args, order, reverse, err := s.listFrame(ctx, "refunds", q)
	if err != nil {
		return listings.Page[payments.Refund]{}, err
	}
	var rows []refundRow
	if err := s.reads.sel(ctx, s.db, &rows, `SELECT `+refundColumns+` FROM refunds FORCE INDEX (`+listIndex("refunds", q)+`) WHERE `+where+
		` ORDER BY `+order+` LIMIT ?`, append(args, q.Limit+1)...); err != nil {
		return listings.Page[payments.Refund]{}, err
	}
	page := listings.Page[payments.Refund]{HasMore: len(rows) > q.Limit}
	rows = rows[:min(len(rows), q.Limit)]
	for _, r := range rows {
		x, err := r.toDomain()
		if err != nil {
			return listings.Page[payments.Refund]{}, err
		}
		page.Items = append(page.Items, x)
	}
	if reverse {
		reverseSlice(page.Items)
	}
	return page, nil
}

func reverseSlice[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
