ALTER TABLE events DROP COLUMN data_version;
ALTER TABLE idempotency_keys DROP COLUMN response_version, DROP COLUMN api_version;
ALTER TABLE webhook_endpoints DROP COLUMN api_version;
ALTER TABLE merchants DROP COLUMN api_version;
