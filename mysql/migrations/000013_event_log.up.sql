-- The events listing (GET /events) pages on log_pos, a merchant's event's
-- position in its merchant's listing, given after its transaction
-- committed, from the merchant's own counter (event_log), in the order the
-- assigner finds committed events: a consumer paging with its cursor never
-- passes an event that commits later, as an AUTO_INCREMENT position taken
-- at insert time (pos) would let it, and on Galera, whose nodes take
-- auto-increment values apart, one order holds too. NULL until placed.
ALTER TABLE events
    ADD COLUMN log_pos BIGINT UNSIGNED NULL AFTER pos,
    DROP KEY events_merchant,
    ADD UNIQUE KEY events_merchant (merchant_id, log_pos),
    ADD KEY events_merchant_type (merchant_id, type, log_pos);
CREATE TABLE event_log (
    merchant_id VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    next_pos    BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (merchant_id)
) ENGINE=InnoDB;
-- Events written before keep their order.
UPDATE events SET log_pos = pos;
