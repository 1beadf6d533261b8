-- Dated API versions (docs/design.md §18). A merchant and a webhook
-- endpoint are pinned to a version (rows older than versions are in the
-- first). A key records the version its request was answered in
-- (api_version: a replay is answered in it) and the version its stored
-- answer is rendered in (response_version: the gateway's latest when it
-- stored it); an event, the version its data is rendered in. NULL is the
-- first version: what was stored before versions existed.
ALTER TABLE merchants
    ADD COLUMN api_version VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '2026-12-01';
ALTER TABLE webhook_endpoints
    ADD COLUMN api_version VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '2026-12-01';
ALTER TABLE idempotency_keys
    ADD COLUMN api_version VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN response_version VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NULL;
ALTER TABLE events
    ADD COLUMN data_version VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NULL;
