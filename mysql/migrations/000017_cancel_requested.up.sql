-- A key whose cancellation by key was requested while it was in progress
-- (design §15): from then on no worker may send its charge again (ArmSend
-- refuses); resumes only look up, and the reconciler proves the outcome.
ALTER TABLE idempotency_keys ADD COLUMN cancel_requested_at DATETIME(6) NULL;
