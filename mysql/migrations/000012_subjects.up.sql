-- A key holds a subject (a payment, a refund, and later a capture or a
-- void): its id, and the sends of its money movement, whatever it moves.
ALTER TABLE idempotency_keys
    RENAME COLUMN payment_id TO subject_id,
    RENAME COLUMN may_charge_until TO may_send_until,
    RENAME COLUMN charge_attempts TO send_attempts,
    RENAME COLUMN charges_not_sent TO sends_not_sent;
