-- Manual capture (design §15). A payment created with capture_method
-- 'manual' is authorized (requires_capture) until a capture takes
-- amount_captured of it (the rest released), a void cancels it, or the
-- authorization lapses at capture_before (kept only while it can be
-- captured, so that payments_capture_before holds only the authorizations
-- the expiry scans). op_* is the capture or void in flight, claimed with
-- the key op_key of its endpoint (op_kind): the compare-and-set that lets
-- one operation at a time at an authorization. A payment's refunds never
-- exceed what it took: its amount (automatic), its amount_captured (manual).
ALTER TABLE payments
    ADD COLUMN capture_method VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'automatic',
    ADD COLUMN amount_captured BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN capture_before DATETIME(6) NULL,
    ADD COLUMN cancellation_reason VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN op_kind VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN op_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN op_amount BIGINT NULL,
    ADD COLUMN op_reason VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD CONSTRAINT payments_captured_within CHECK (amount_captured >= 0 AND amount_captured <= amount),
    ADD KEY payments_capture_before (capture_before);
