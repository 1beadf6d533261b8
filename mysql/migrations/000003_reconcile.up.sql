-- may_charge_until: the end of the last lease held by a worker that may send
-- a charge (a claim, or a client's takeover; never the reconciler). No charge
-- for the key can have been sent after it, so once it plus the PSP's creation
-- window has passed, "not found" at the PSP means "never charged".
-- reconcile_after: when the reconciler should next look at an unfinished key.
-- It is apart from locked_until so that a key the reconciler defers stays
-- free for the client's own retry.
ALTER TABLE idempotency_keys
    ADD COLUMN may_charge_until DATETIME(6) NULL AFTER locked_until,
    ADD COLUMN reconcile_after DATETIME(6) NULL AFTER may_charge_until,
    ADD COLUMN reconcile_attempts INT NOT NULL DEFAULT 0 AFTER reconcile_after,
    DROP KEY idempotency_keys_unfinished,
    ADD KEY idempotency_keys_reconcile (state, reconcile_after);

UPDATE idempotency_keys SET may_charge_until = locked_until, reconcile_after = locked_until
WHERE state = 'IN_PROGRESS';

-- Ops look payments up by id alone.
ALTER TABLE payments ADD KEY payments_id (id), ADD KEY payments_status (status, created_at);

-- Every manual override of a payment's outcome: who, why, when, from what.
CREATE TABLE payment_resolutions (
    merchant_id  VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id           VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payment_id   VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    from_status  VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    to_status    VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    psp_reference VARCHAR(255) NULL,
    reason       VARCHAR(1000) NOT NULL,
    actor        VARCHAR(255) NOT NULL,
    created_at   DATETIME(6) NOT NULL,
    PRIMARY KEY (merchant_id, id),
    KEY payment_resolutions_payment (merchant_id, payment_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
