DROP TABLE merchant_origins;
DROP TABLE publishable_keys;
ALTER TABLE payments DROP COLUMN client_secret_hash;
