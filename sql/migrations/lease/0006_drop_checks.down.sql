ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_token_positive CHECK (fence_token > 0);
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_account_len CHECK (octet_length(account_id) BETWEEN 1 AND 256);
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_session_len CHECK (octet_length(session_id) BETWEEN 1 AND 256);
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_run_nonzero CHECK (run_id <> '00000000-0000-0000-0000-000000000000');
