ALTER TABLE refunds  DROP COLUMN event_seq;
ALTER TABLE payments DROP COLUMN event_seq;
DROP TABLE events;
