-- Two-step checkout: a payment created with "confirm": false waits in
-- requires_confirmation until expires_at (the database's clock), when the
-- reconciler cancels it unless a confirm took it first. confirm_key is the
-- Idempotency-Key of the confirm that charged it (its key answers with the
-- outcome). next_action is what the customer's front end must do while the
-- payment is in requires_action (JSON; it may hold the PSP's client secret,
-- as the stored answer does). A payment in requires_action is looked at again
-- on the schedule of the review columns (review_since, review_after,
-- review_attempts), as refunds pending at their PSP are.
-- payments_order and refunds_order_id find what a PSP's notification names:
-- it knows order ids, not merchants.
ALTER TABLE payments
    ADD COLUMN expires_at DATETIME(6) NULL AFTER review_not_found_at,
    ADD COLUMN confirm_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER expires_at,
    ADD COLUMN next_action TEXT NULL AFTER confirm_key,
    ADD KEY payments_expiry (status, expires_at),
    ADD KEY payments_order (merchant_order_id);

ALTER TABLE refunds ADD KEY refunds_order_id (refund_order_id);
