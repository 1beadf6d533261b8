-- The unsharded keyspace gateway_lookup: where each sharded row lives, for
-- the ops and authentication queries that do not name a merchant. Vitess
-- writes these rows in the same transaction as the row they point to
-- (consistent_lookup*).

-- Ops resolve a payment by its id alone (payments.id is a ULID, unique).
CREATE TABLE payments_id_lookup (
    id          VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    keyspace_id VARBINARY(16) NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;

-- Authentication finds an API key by its visible prefix before it knows the
-- merchant. A prefix is not declared unique, so the lookup is non-unique.
CREATE TABLE api_keys_prefix_lookup (
    prefix      VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    keyspace_id VARBINARY(16) NOT NULL,
    PRIMARY KEY (prefix, keyspace_id)
) ENGINE=InnoDB;

-- Ops resolve a refund by its id alone (refunds.id is a ULID, unique).
CREATE TABLE refunds_id_lookup (
    id          VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    keyspace_id VARBINARY(16) NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;

-- A PSP's notification names an order id, not a merchant: the payments of a
-- merchant order id, and the refunds of a refund order id. Both are unique
-- per merchant only (and, being hashes of the merchant, in practice
-- everywhere), so the lookups are non-unique.
CREATE TABLE payments_order_lookup (
    merchant_order_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    keyspace_id       VARBINARY(16) NOT NULL,
    PRIMARY KEY (merchant_order_id, keyspace_id)
) ENGINE=InnoDB;

CREATE TABLE refunds_order_lookup (
    refund_order_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    keyspace_id     VARBINARY(16) NOT NULL,
    PRIMARY KEY (refund_order_id, keyspace_id)
) ENGINE=InnoDB;

-- Browser checkout: a publishable key is found by its visible prefix before
-- the merchant is known, as an API key is; a CORS preflight asks whether any
-- merchant allows an origin. Neither is unique.
CREATE TABLE publishable_keys_prefix_lookup (
    prefix      VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    keyspace_id VARBINARY(16) NOT NULL,
    PRIMARY KEY (prefix, keyspace_id)
) ENGINE=InnoDB;

CREATE TABLE merchant_origins_origin_lookup (
    origin      VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    keyspace_id VARBINARY(16) NOT NULL,
    PRIMARY KEY (origin, keyspace_id)
) ENGINE=InnoDB;

-- The events' positions (events.pos). A sharded table's AUTO_INCREMENT
-- would count per shard; vtgate takes pos from this sequence instead (the
-- events table's auto_increment in vschema.gateway.json), in blocks of
-- `cache` per vttablet, so positions are unique across shards and grow
-- within each block. Seed it with one row: next_id past the largest pos
-- already stored.
CREATE TABLE events_pos_seq (
    id      INT NOT NULL,
    next_id BIGINT NOT NULL,
    cache   BIGINT NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB COMMENT 'vitess_sequence';
INSERT INTO events_pos_seq (id, next_id, cache) VALUES (0, 1, 1000);
