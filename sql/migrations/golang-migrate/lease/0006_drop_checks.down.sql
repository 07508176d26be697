-- Code generated from lease/0006_drop_checks.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 6;

ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_token_positive CHECK (fence_token > 0);
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_account_len CHECK (octet_length(account_id) BETWEEN 1 AND 256);
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_session_len CHECK (octet_length(session_id) BETWEEN 1 AND 256);
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_run_nonzero CHECK (run_id <> '00000000-0000-0000-0000-000000000000');
