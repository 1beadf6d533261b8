DROP TABLE refund_resolutions;
ALTER TABLE payments
    DROP KEY payments_list,
    DROP CONSTRAINT payments_refunded_within,
    DROP CONSTRAINT payments_reserved_within,
    DROP COLUMN amount_refunded,
    DROP COLUMN amount_reserved;
DROP TABLE refunds;
