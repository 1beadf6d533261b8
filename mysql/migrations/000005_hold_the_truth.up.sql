-- charge_attempts / charges_not_sent: how many sends workers were allowed to
-- make for a key, and how many of those certainly did nothing (the PSP said
-- not processed, or the worker gave its lease back unsent). Equal counts
-- prove that nothing was charged. Rows from before this column count one
-- send of unknown fate.
-- not_found_at: when the reconciler, under its own lease, first learned that
-- the PSP authoritatively has no charge; "failed" needs a second such answer
-- a creation window later.
-- quarantine_reason: a row the reconciler cannot read (its payment missing or
-- undecodable) is set aside, counted and never settled by itself.
ALTER TABLE idempotency_keys
    ADD COLUMN charge_attempts INT NOT NULL DEFAULT 1 AFTER reconcile_attempts,
    ADD COLUMN charges_not_sent INT NOT NULL DEFAULT 0 AFTER charge_attempts,
    ADD COLUMN not_found_at DATETIME(6) NULL AFTER charges_not_sent,
    ADD COLUMN quarantine_reason VARCHAR(255) NULL AFTER not_found_at;

-- A key written before may_charge_until existed has no proof of when its
-- last charge could have left: assume one could have until an hour from now.
UPDATE idempotency_keys
SET may_charge_until = GREATEST(COALESCE(locked_until, updated_at), NOW(6) + INTERVAL 1 HOUR)
WHERE state = 'IN_PROGRESS' AND may_charge_until IS NULL;

-- psp: the adapter (and account) a payment was sent to; its lookups and
-- refunds go there and nowhere else. NULL for payments from before: they
-- are never settled by a PSP that cannot be known to be theirs.
-- review_*: the review queue heals itself: the reconciler keeps looking a
-- payment in requires_review up, on a long back-off, and settles it when the
-- PSP answers with authority.
ALTER TABLE payments
    ADD COLUMN psp VARCHAR(100) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER decline_code,
    ADD COLUMN review_reason VARCHAR(500) NULL AFTER psp,
    ADD COLUMN review_since DATETIME(6) NULL AFTER review_reason,
    ADD COLUMN review_after DATETIME(6) NULL AFTER review_since,
    ADD COLUMN review_attempts INT NOT NULL DEFAULT 0 AFTER review_after,
    ADD COLUMN review_not_found_at DATETIME(6) NULL AFTER review_attempts,
    ADD KEY payments_review (status, review_after);

UPDATE payments SET review_since = updated_at, review_after = updated_at
WHERE status = 'requires_review';
