-- Attempts (design §16): a payment's current attempt is on its row (psp,
-- merchant_order_id, attempt, attempt_at); the attempts before it, each
-- ended certainly not processed, are rows here, one per attempt, and a
-- copy on the payment (attempts, JSON) that every read of the payment
-- renders without another query. The reconciler checks each earlier
-- attempt at its own account once its creation window has passed
-- (check_after; NULL once the check settled it).
ALTER TABLE payments
    ADD COLUMN attempt INT NOT NULL DEFAULT 1,
    ADD COLUMN attempt_at DATETIME(6) NULL,
    ADD COLUMN attempts TEXT NULL;

CREATE TABLE payment_attempts (
    merchant_id       VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payment_id        VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt           INT NOT NULL,
    psp               VARCHAR(100) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    merchant_order_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    outcome           VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    psp_code          VARCHAR(255) NULL,
    psp_reference     VARCHAR(255) NULL,
    started_at        DATETIME(6) NOT NULL,
    ended_at          DATETIME(6) NOT NULL,
    check_after       DATETIME(6) NULL,
    check_attempts    INT NOT NULL DEFAULT 0,
    PRIMARY KEY (merchant_id, payment_id, attempt),
    UNIQUE KEY payment_attempts_order (psp, merchant_order_id),
    KEY payment_attempts_due (check_after)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
