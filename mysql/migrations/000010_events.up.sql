-- One row per state change of a payment or refund, inserted in the same transaction as the change.
CREATE TABLE events (
    pos          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,  -- insertion order; cursor for paging and fan-out
    id           VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,  -- evt_ + ULID, stable
    merchant_id  VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    type         VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,  -- e.g. payment.succeeded
    object_type  VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,  -- payment | refund
    object_id    VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    seq          INT UNSIGNED NOT NULL,          -- per object, only grows (from payments/refunds.event_seq)
    data         MEDIUMTEXT NOT NULL,            -- the object exactly as the API renders it then (no client_secret)
    created_at   DATETIME(6) NOT NULL,           -- the database's NOW(6)
    fanned_out   TINYINT NOT NULL DEFAULT 0,     -- 1 once the dispatcher made its deliveries
    PRIMARY KEY (pos),
    UNIQUE KEY events_id (id),
    UNIQUE KEY events_object_seq (merchant_id, object_id, seq),
    KEY events_merchant (merchant_id, pos),
    KEY events_fanout (fanned_out, pos),
    KEY events_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
ALTER TABLE payments ADD COLUMN event_seq INT UNSIGNED NOT NULL DEFAULT 0;
ALTER TABLE refunds  ADD COLUMN event_seq INT UNSIGNED NOT NULL DEFAULT 0;
