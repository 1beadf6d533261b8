ALTER TABLE payments DROP COLUMN psp_code;
