ALTER TABLE idempotency_keys
    RENAME COLUMN subject_id TO payment_id,
    RENAME COLUMN may_send_until TO may_charge_until,
    RENAME COLUMN send_attempts TO charge_attempts,
    RENAME COLUMN sends_not_sent TO charges_not_sent;
