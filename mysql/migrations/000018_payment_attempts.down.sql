DROP TABLE payment_attempts;
ALTER TABLE payments DROP COLUMN attempts, DROP COLUMN attempt_at, DROP COLUMN attempt;
