DROP TABLE event_log;
ALTER TABLE events
    DROP KEY events_merchant_type,
    DROP KEY events_merchant,
    ADD KEY events_merchant (merchant_id, pos),
    DROP COLUMN log_pos;
