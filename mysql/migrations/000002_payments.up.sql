-- One row per payment intent. The unique keys are the last backstop against a
-- double charge: one payment per (merchant, idempotency key), and one per
-- merchant order id, which is what the PSP deduplicates on.
CREATE TABLE payments (
    merchant_id       VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id                VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    idem_key          VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    merchant_order_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status            VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    amount            BIGINT NOT NULL,
    currency          CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payment_method    VARCHAR(255) NOT NULL,
    description       VARCHAR(1000) NOT NULL DEFAULT '',
    metadata          TEXT NULL,
    psp_reference     VARCHAR(255) NULL,
    decline_code      VARCHAR(64) NULL,
    created_at        DATETIME(6) NOT NULL,
    updated_at        DATETIME(6) NOT NULL,
    PRIMARY KEY (merchant_id, id),
    UNIQUE KEY payments_idem_key (merchant_id, idem_key),
    UNIQUE KEY payments_merchant_order (merchant_id, merchant_order_id),
    CONSTRAINT payments_amount_positive CHECK (amount > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per (merchant, endpoint, key). The primary key decides every race
-- between duplicates; lease_version is the fencing token every write after
-- the PSP call is conditional on.
CREATE TABLE idempotency_keys (
    merchant_id     VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    endpoint        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    idem_key        VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fingerprint     BINARY(32) NOT NULL,
    state           VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payment_id      VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    lease_version   BIGINT NOT NULL,
    locked_until    DATETIME(6) NULL,
    response_status SMALLINT NULL,
    response_body   MEDIUMBLOB NULL,
    created_at      DATETIME(6) NOT NULL,
    updated_at      DATETIME(6) NOT NULL,
    completed_at    DATETIME(6) NULL,
    PRIMARY KEY (merchant_id, endpoint, idem_key),
    KEY idempotency_keys_unfinished (state, locked_until),
    KEY idempotency_keys_completed (state, completed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
