DROP TABLE payment_resolutions;
ALTER TABLE payments DROP KEY payments_status, DROP KEY payments_id;
ALTER TABLE idempotency_keys
    DROP KEY idempotency_keys_reconcile,
    ADD KEY idempotency_keys_unfinished (state, locked_until),
    DROP COLUMN reconcile_attempts, DROP COLUMN reconcile_after, DROP COLUMN may_charge_until;
