-- The delivery log (docs/design.md §12): one row per attempt of a webhook
-- delivery, written in the transaction that records the attempt, fenced on
-- the claim's token (an attempt whose claim lost its lease leaves none).
-- attempted_at is when the POST began on the database's clock;
-- next_attempt_at is when the delivery was due again after it (NULL once
-- delivered or given up). Purged with the deliveries, past the events'
-- retention.
CREATE TABLE webhook_delivery_attempts (
    merchant_id     VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    delivery_id     VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt         INT NOT NULL,
    attempted_at    DATETIME(6) NOT NULL,
    latency_us      BIGINT NOT NULL,
    http_status     INT NULL,
    error           VARCHAR(500) NULL,
    outcome         VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    next_attempt_at DATETIME(6) NULL,
    PRIMARY KEY (merchant_id, delivery_id, attempt),
    KEY webhook_delivery_attempts_purge (attempted_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- A redelivery a merchant asked for (POST /events/{id}/redeliver) carries
-- its Idempotency-Key: the unique key decides a race between two requests
-- with it. The listing of an endpoint's deliveries pages by
-- (created_at, id), newest first.
ALTER TABLE webhook_deliveries
    ADD COLUMN redelivery_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD UNIQUE KEY webhook_deliveries_redelivery (merchant_id, redelivery_key),
    ADD KEY webhook_deliveries_log (merchant_id, endpoint_id, created_at, id);
