-- Cancel-by-key (design §15): one row per POST /payments key a merchant
-- canceled with POST /payments/cancel_by_key, whatever that key did or will
-- do. cancel_key is the cancellation's own Idempotency-Key, whose stored
-- answer is rewritten when the cancellation finishes. status: canceled
-- (nothing was or will be charged), voided, refunded, cancel_requested
-- (being carried out: due_at is the reconciler's next look),
-- requires_review. A key canceled before anything was claimed keeps a
-- completed idempotency key with no subject (a tombstone the purge keeps),
-- so that a late duplicate of the original request replays the
-- cancellation and never charges.
CREATE TABLE key_cancellations (
    merchant_id   VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    idem_key      VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    cancel_key    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    reason        VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status        VARCHAR(20) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payment_id    VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NULL,
    refund_id     VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NULL,
    detail        VARCHAR(500) NULL,
    due_at        DATETIME(6) NULL,
    attempts      INT NOT NULL DEFAULT 0,
    created_at    DATETIME(6) NOT NULL,
    updated_at    DATETIME(6) NOT NULL,
    PRIMARY KEY (merchant_id, idem_key),
    KEY key_cancellations_due (due_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
