package bench

import "strings"

// The design note's statements on its own plain table (the seed), and a
// variant that keeps the row on release: the floor fencekit's lease cycle
// is compared with. Only the schema is interpolated (quoted by the caller);
// values are bound: $1 account, $2 session, $3 run_id, $4 TTL in seconds.

// seedDDL creates the seed's table and the keep-row variant's in schema q.
func seedDDL(q string) string {
	return strings.ReplaceAll(`CREATE TABLE $S.demo_session_lease (
  account_id text NOT NULL,
  session_id text NOT NULL,
  run_id uuid NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (account_id, session_id)
);
CREATE TABLE $S.demo_session_lease_kept (
  account_id text NOT NULL,
  session_id text NOT NULL,
  run_id uuid NOT NULL,
  expires_at timestamptz NOT NULL,
  released_at timestamptz,
  PRIMARY KEY (account_id, session_id)
)`, "$S", q)
}

// cycleSQL is one acquire statement and one release statement; each
// returns the run_id when it took effect and no row otherwise.
type cycleSQL struct{ acquire, release string }

// seedSQL is the design note's conditional UPSERT and run_id-matched DELETE.
func seedSQL(q string) cycleSQL {
	r := strings.NewReplacer("$S", q)
	return cycleSQL{
		acquire: r.Replace(`WITH lease_clock AS (
  SELECT clock_timestamp() AS observed_at
)
INSERT INTO $S.demo_session_lease AS held (
  account_id, session_id, run_id, expires_at
)
SELECT $1, $2, $3,
       observed_at + make_interval(secs => $4)
FROM lease_clock
ON CONFLICT (account_id, session_id) DO UPDATE
SET run_id = EXCLUDED.run_id,
    expires_at = EXCLUDED.expires_at
WHERE held.expires_at <= (SELECT observed_at FROM lease_clock)
RETURNING run_id`),
		release: r.Replace(`DELETE FROM $S.demo_session_lease
WHERE account_id = $1
  AND session_id = $2
  AND run_id = $3
RETURNING run_id`),
	}
}

// keepRowSQL is the seed with the row kept on release: the UPSERT also
// clears released_at, and release is an UPDATE that marks the row released
// and expired instead of deleting it.
func keepRowSQL(q string) cycleSQL {
	r := strings.NewReplacer("$S", q)
	return cycleSQL{
		acquire: r.Replace(`WITH lease_clock AS (
  SELECT clock_timestamp() AS observed_at
)
INSERT INTO $S.demo_session_lease_kept AS held (
  account_id, session_id, run_id, expires_at
)
SELECT $1, $2, $3,
       observed_at + make_interval(secs => $4)
FROM lease_clock
ON CONFLICT (account_id, session_id) DO UPDATE
SET run_id = EXCLUDED.run_id,
    expires_at = EXCLUDED.expires_at,
    released_at = NULL
WHERE held.expires_at <= (SELECT observed_at FROM lease_clock)
RETURNING run_id`),
		release: r.Replace(`UPDATE $S.demo_session_lease_kept
   SET released_at = clock_timestamp(), expires_at = clock_timestamp()
 WHERE account_id = $1
   AND session_id = $2
   AND run_id = $3
   AND released_at IS NULL
RETURNING run_id`),
	}
}

// rawSQL is fencekit's table driven by plain statements: a single-statement
// conditional upsert drawing the token, and a run_id-matched release that
// keeps the row ($1 account, $2 session, $3 run_id).
func rawSQL(q string) cycleSQL {
	r := strings.NewReplacer("$S", q)
	return cycleSQL{
		acquire: r.Replace(`INSERT INTO $S.fencekit_leases AS held
  (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, released_at)
VALUES ($1, $2, $3, nextval('$S.fencekit_token_seq'), now(), now(), now() + interval '15 seconds', NULL)
ON CONFLICT (account_id, session_id) DO UPDATE SET run_id = EXCLUDED.run_id,
  fence_token = nextval('$S.fencekit_token_seq'), acquired_at = EXCLUDED.acquired_at,
  renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at, released_at = NULL
WHERE held.expires_at <= EXCLUDED.acquired_at
RETURNING held.run_id`),
		release: r.Replace(`UPDATE $S.fencekit_leases SET released_at = now(), expires_at = now()
WHERE account_id = $1 AND session_id = $2 AND run_id = $3 AND released_at IS NULL
RETURNING run_id`),
	}
}
