-- One row per refund. Its key lives in idempotency_keys (endpoint
-- 'POST /payments/{id}/refunds', payment_id holding the refund's id). The
-- unique keys are the last backstop against paying a refund twice: one
-- refund per (merchant, key) and per refund order id, which is what the PSP
-- deduplicates on.
CREATE TABLE refunds (
    merchant_id         VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id                  VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payment_id          VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    idem_key            VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    refund_order_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status              VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    amount              BIGINT NOT NULL,
    currency            CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    reason              VARCHAR(500) NOT NULL DEFAULT '',
    metadata            TEXT NULL,
    psp_reference       VARCHAR(255) NULL,
    failure_code        VARCHAR(64) NULL,
    psp_code            VARCHAR(100) NULL,
    psp                 VARCHAR(100) CHARACTER SET ascii COLLATE ascii_bin NULL,
    review_reason       VARCHAR(500) NULL,
    review_since        DATETIME(6) NULL,
    review_after        DATETIME(6) NULL,
    review_attempts     INT NOT NULL DEFAULT 0,
    review_not_found_at DATETIME(6) NULL,
    created_at          DATETIME(6) NOT NULL,
    updated_at          DATETIME(6) NOT NULL,
    PRIMARY KEY (merchant_id, id),
    UNIQUE KEY refunds_idem_key (merchant_id, idem_key),
    UNIQUE KEY refunds_order (merchant_id, refund_order_id),
    KEY refunds_payment (merchant_id, payment_id, created_at),
    KEY refunds_list (merchant_id, created_at, id),
    KEY refunds_id (id),
    KEY refunds_check (status, review_after),
    CONSTRAINT refunds_amount_positive CHECK (amount > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- amount_reserved: what a payment's pending, succeeded and in-review refunds
-- hold together, never more than amount (a refund's claim reserves under the
-- payment's row lock; a failed refund gives its share back).
-- amount_refunded: what its succeeded refunds gave back.
ALTER TABLE payments
    ADD COLUMN amount_reserved BIGINT NOT NULL DEFAULT 0 AFTER amount,
    ADD COLUMN amount_refunded BIGINT NOT NULL DEFAULT 0 AFTER amount_reserved,
    ADD CONSTRAINT payments_reserved_within CHECK (amount_reserved >= 0 AND amount_reserved <= amount),
    ADD CONSTRAINT payments_refunded_within CHECK (amount_refunded >= 0 AND amount_refunded <= amount_reserved),
    ADD KEY payments_list (merchant_id, created_at, id);

-- Every decision on a refund nobody could settle: who, why, when, from what.
CREATE TABLE refund_resolutions (
    merchant_id   VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id            VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    refund_id     VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    from_status   VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    to_status     VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    psp_reference VARCHAR(255) NULL,
    reason        VARCHAR(1000) NOT NULL,
    actor         VARCHAR(255) NOT NULL,
    created_at    DATETIME(6) NOT NULL,
    PRIMARY KEY (merchant_id, id),
    KEY refund_resolutions_refund (merchant_id, refund_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
