ALTER TABLE idempotency_keys DROP COLUMN cancel_requested_at;
