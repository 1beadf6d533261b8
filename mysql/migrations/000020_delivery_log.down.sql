ALTER TABLE webhook_deliveries
    DROP KEY webhook_deliveries_log,
    DROP KEY webhook_deliveries_redelivery,
    DROP COLUMN redelivery_key;
DROP TABLE webhook_delivery_attempts;
