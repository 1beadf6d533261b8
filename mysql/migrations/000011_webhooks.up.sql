-- Merchants' webhook endpoints. The signing secret is needed in plain to
-- sign, so it is stored encrypted (AES-256-GCM under the key of
-- GATEWAY_WEBHOOK_KEY, bound to the endpoint's id); during a rotation the
-- previous secret stays valid until prev_secret_until, and both sign.
-- failing_since is when the endpoint's current run of failed attempts began
-- (NULL after any success); an endpoint failing that way too long is disabled.
CREATE TABLE webhook_endpoints (
    merchant_id       VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id                VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    url               VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    event_types       VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status            VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    description       VARCHAR(500) NOT NULL DEFAULT '',
    secret_enc        VARBINARY(255) NOT NULL,
    prev_secret_enc   VARBINARY(255) NULL,
    prev_secret_until DATETIME(6) NULL,
    failing_since     DATETIME(6) NULL,
    disabled_reason   VARCHAR(500) NULL,
    created_at        DATETIME(6) NOT NULL,
    updated_at        DATETIME(6) NOT NULL,
    PRIMARY KEY (merchant_id, id),
    KEY webhook_endpoints_list (merchant_id, created_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per (event, endpoint) to deliver, made by the dispatcher's fan-out
-- in the transaction that marks the event fanned out (or by ops' resend).
-- A dispatcher claims a due row under FOR UPDATE SKIP LOCKED, bumps
-- lease_token (its fence) and pushes next_attempt_at to the lease's end on
-- the database's clock: a dispatcher that dies mid-attempt leaves a row due
-- again once its lease is over. last_error never holds a secret.
CREATE TABLE webhook_deliveries (
    merchant_id        VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id                 VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    endpoint_id        VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    event_id           VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status             VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempts           INT NOT NULL DEFAULT 0,
    next_attempt_at    DATETIME(6) NOT NULL,
    lease_until        DATETIME(6) NULL,
    lease_token        BIGINT NOT NULL DEFAULT 0,
    last_http_status   INT NULL,
    last_error         VARCHAR(500) NULL,
    first_delivered_at DATETIME(6) NULL,
    created_at         DATETIME(6) NOT NULL,
    updated_at         DATETIME(6) NOT NULL,
    PRIMARY KEY (merchant_id, id),
    KEY webhook_deliveries_due (status, next_attempt_at),
    KEY webhook_deliveries_endpoint (merchant_id, endpoint_id, status, next_attempt_at),
    KEY webhook_deliveries_event (merchant_id, event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
