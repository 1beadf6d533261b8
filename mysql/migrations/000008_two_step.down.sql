ALTER TABLE refunds DROP KEY refunds_order_id;
ALTER TABLE payments
    DROP KEY payments_order,
    DROP KEY payments_expiry,
    DROP COLUMN next_action,
    DROP COLUMN confirm_key,
    DROP COLUMN expires_at;
