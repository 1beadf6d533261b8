CREATE TABLE merchants (
    id         VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name       VARCHAR(255) NOT NULL,
    created_at DATETIME(6) NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- API keys are looked up by the SHA-256 of the presented secret; the plaintext is never stored.
CREATE TABLE api_keys (
    key_hash    BINARY(32) NOT NULL,
    merchant_id VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    prefix      VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at  DATETIME(6) NOT NULL,
    revoked_at  DATETIME(6) NULL,
    PRIMARY KEY (key_hash),
    KEY api_keys_merchant (merchant_id),
    CONSTRAINT api_keys_merchant_fk FOREIGN KEY (merchant_id) REFERENCES merchants (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
