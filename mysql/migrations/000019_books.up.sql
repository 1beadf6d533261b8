CREATE TABLE books_runs (
    id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    account       VARCHAR(100) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    period_from   DATETIME(6) NOT NULL,   -- UTC, half-open [period_from, period_to)
    period_to     DATETIME(6) NOT NULL,
    status        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,  -- running | incomplete | complete
    passes        INT NOT NULL DEFAULT 0,   -- passes started; a rerun of a complete period is one more
    lease_token   BIGINT NOT NULL DEFAULT 0,
    lease_until   DATETIME(6) NULL,         -- the database's clock
    ledger_cursor VARCHAR(1024) CHARACTER SET ascii COLLATE ascii_bin NULL,  -- where the pass resumes
    phase         VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'ledger',  -- ledger | gateway | done
    ledger_lines  BIGINT NOT NULL DEFAULT 0,
    matched       BIGINT NOT NULL DEFAULT 0,
    unsettled     BIGINT NOT NULL DEFAULT 0,
    no_money      BIGINT NOT NULL DEFAULT 0,
    outside       BIGINT NOT NULL DEFAULT 0,
    checked       BIGINT NOT NULL DEFAULT 0,
    last_error    VARCHAR(500) NULL,
    created_at    DATETIME(6) NOT NULL,
    updated_at    DATETIME(6) NOT NULL,
    completed_at  DATETIME(6) NULL,
    PRIMARY KEY (id),
    UNIQUE KEY books_runs_period (account, period_from, period_to),
    KEY books_runs_completed (account, completed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE books_discrepancies (
    id             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    run_id         BIGINT UNSIGNED NOT NULL,
    account        VARCHAR(100) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    class          VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    subject        VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,  -- the order id, refund order id or PSP reference it is about
    action         VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    merchant_id    VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NULL,
    payment_id     VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NULL,
    refund_id      VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NULL,
    detail         VARCHAR(500) NOT NULL,
    psp_record     TEXT NULL,      -- JSON: the PSP's line
    gateway_record TEXT NULL,      -- JSON: the gateway's record as it was
    created_at     DATETIME(6) NOT NULL,
    resolved_at    DATETIME(6) NULL,       -- an operator's acknowledgement (gateway books resolve)
    resolution     VARCHAR(1000) NULL,
    PRIMARY KEY (id),
    UNIQUE KEY books_discrepancies_subject (account, class, subject),
    KEY books_discrepancies_run (run_id, id),
    KEY books_discrepancies_open (resolved_at, class)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

ALTER TABLE payments ADD KEY payments_books (psp, created_at);
ALTER TABLE refunds ADD KEY refunds_books (psp, created_at);
ALTER TABLE idempotency_keys ADD KEY idempotency_keys_created (created_at);
