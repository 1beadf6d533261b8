-- psp_code: the PSP's own raw code for a decline or a refusal, verbatim, kept
-- for the record beside the shared decline_code.
ALTER TABLE payments ADD COLUMN psp_code VARCHAR(100) NULL AFTER decline_code;
