-- Browser checkout. A merchant's server creates a payment with its secret
-- key; the answer carries the payment's client secret, of which only the
-- SHA-256 is kept here (client_secret_hash; NULL for payments created to be
-- charged at once). The customer's browser then reads and confirms that one
-- payment with a publishable key (pk_…) and the client secret.
ALTER TABLE payments ADD COLUMN client_secret_hash BINARY(32) NULL AFTER next_action;

-- Publishable keys are stored as API keys are: the SHA-256 of the key and
-- its visible prefix, by which it is found before the hash is compared.
-- They are public by design (every visitor of the checkout page sees one),
-- yet a revoked one must stop working, so they are looked up as API keys are.
CREATE TABLE publishable_keys (
    merchant_id VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    key_hash    BINARY(32) NOT NULL,
    prefix      VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at  DATETIME(6) NOT NULL,
    revoked_at  DATETIME(6) NULL,
    PRIMARY KEY (merchant_id, key_hash),
    KEY publishable_keys_prefix (prefix),
    CONSTRAINT publishable_keys_merchant_fk FOREIGN KEY (merchant_id) REFERENCES merchants (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The browser origins (scheme://host[:port], as browsers send them in
-- Origin) a merchant's checkout pages are served from. A CORS preflight
-- names no merchant, so it is answered for an origin any merchant allows
-- (merchant_origins_origin); the request that follows is checked against
-- its own merchant's origins.
CREATE TABLE merchant_origins (
    merchant_id VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    origin      VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at  DATETIME(6) NOT NULL,
    PRIMARY KEY (merchant_id, origin),
    KEY merchant_origins_origin (origin),
    CONSTRAINT merchant_origins_merchant_fk FOREIGN KEY (merchant_id) REFERENCES merchants (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
