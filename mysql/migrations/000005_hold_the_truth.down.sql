ALTER TABLE payments
    DROP KEY payments_review,
    DROP COLUMN review_not_found_at,
    DROP COLUMN review_attempts,
    DROP COLUMN review_after,
    DROP COLUMN review_since,
    DROP COLUMN review_reason,
    DROP COLUMN psp;

ALTER TABLE idempotency_keys
    DROP COLUMN quarantine_reason,
    DROP COLUMN not_found_at,
    DROP COLUMN charges_not_sent,
    DROP COLUMN charge_attempts;
