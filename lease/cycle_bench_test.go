package lease_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// BenchmarkCycle is one lease cycle, Manager.Acquire + Lease.Release of a
// free key (manager), by one caller cycling over 64 keys (so every acquire
// after the first 64 takes the ON CONFLICT path, as in fence-bench's
// lease_cycle case), and the same two statements sent with pgx directly
// (statements: the Manager's own work is the difference). ns/op is the
// round trips plus the client's work; allocs/op and B/op are the client's
// alone, and user-ns/op and sys-ns/op are the process's CPU time per cycle
// (getrusage): the client's work, the Manager's background loops
// included, in Go (user) and in the kernel's socket calls (sys)
// (docs/performance.md, "Where the lease cycle's time goes").
func BenchmarkCycle(b *testing.B) {
	fencetest.SkipShort(b)
	for _, mode := range []lease.RenewalMode{lease.RenewalHeartbeat, lease.RenewalPerLease} {
		b.Run(mode.String(), func(b *testing.B) {
			pool := fencetest.Pool(b)
			m, err := lease.New(lease.Config{Pool: pool, Schema: fencetest.Schema(b, migrations.Lease), Renewal: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = m.Close() }()
			ctx := bg()
			b.Run("manager", func(b *testing.B) { cycles(b, managerCycle(ctx, m)) })
			// The same with a caller's context that can be cancelled, as a
			// server's request context can.
			b.Run("manager_cancellable", func(b *testing.B) {
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				cycles(b, managerCycle(cctx, m))
			})
			b.Run("statements", func(b *testing.B) {
				cycle, err := lease.StatementCycle(ctx, m)
				if err != nil {
					b.Fatal(err)
				}
				cycles(b, cycle)
			})
		})
	}
}

// managerCycle is one lease cycle of m under ctx: Acquire, then Release.
func managerCycle(ctx context.Context, m *lease.Manager) func(lease.Key) error {
	return func(k lease.Key) error {
		l, err := m.Acquire(ctx, k)
		if err != nil {
			return err
		}
		if res, err := l.Release(ctx); err != nil || res != lease.ReleaseDone {
			return fmt.Errorf("release: %v %w", res, err)
		}
		return nil
	}
}

// cycles runs cycle over 64 keys, one cycle per iteration, and reports
// the process's CPU time per cycle.
func cycles(b *testing.B, cycle func(lease.Key) error) {
	keys := make([]lease.Key, 64)
	for i := range keys {
		keys[i] = lease.Key{AccountID: "bench", SessionID: fmt.Sprintf("s%d", i)}
	}
	b.ReportAllocs()
	user0, sys0 := processCPU(b)
	i := 0
	for b.Loop() {
		if err := cycle(keys[i%len(keys)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	user, sys := processCPU(b)
	b.ReportMetric(float64(user-user0)/float64(b.N), "user-ns/op")
	b.ReportMetric(float64(sys-sys0)/float64(b.N), "sys-ns/op")
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkServerLoop is the lease cycle's server time alone: a PL/pgSQL
// procedure runs one side's acquire and release statements b.N times inside
// one backend, a COMMIT after each statement (synchronous_commit off, so no
// WAL flush is waited for), over 64 keys (every acquire after the first 64
// takes the ON CONFLICT path), so neither the network, the protocol nor the
// client counts; ns/op is backend time per cycle. Sides: seed, the design
// note's UPSERT + DELETE on its own table (the text of cmd/fence-bench's
// seed side); raw, plain statements on a copy of fencekit's table with a
// sequence of its own (token drawn under the row lock, row kept); manager, the Manager's own acquire and release
// text with the parameters it binds, under its live heartbeat epoch
// (docs/performance.md, "The holder label's CHECK constraint").
func BenchmarkServerLoop(b *testing.B) {
	fencetest.SkipShort(b)
	ctx := bg()
	pool := fencetest.Pool(b)
	schema := fencetest.Schema(b, migrations.Lease)
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, Renewal: lease.RenewalHeartbeat})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	acquire, release, epoch, err := lease.ServerLoopSides(ctx, m)
	if err != nil {
		b.Fatal(err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+q+`.demo_session_lease (account_id text NOT NULL, session_id text NOT NULL,
  run_id uuid NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (account_id, session_id));
CREATE TABLE `+q+`.raw_leases (LIKE `+q+`.fencekit_leases INCLUDING ALL);
CREATE SEQUENCE `+q+`.raw_seq`); err != nil {
		b.Fatal(err)
	}
	sides := []struct{ name, acquire, release string }{
		{"seed", `WITH lease_clock AS (SELECT clock_timestamp() AS observed_at)
INSERT INTO ` + q + `.demo_session_lease AS held (account_id, session_id, run_id, expires_at)
SELECT p1, p2, p3, observed_at + make_interval(secs => 15) FROM lease_clock
ON CONFLICT (account_id, session_id) DO UPDATE SET run_id = EXCLUDED.run_id, expires_at = EXCLUDED.expires_at
WHERE held.expires_at <= (SELECT observed_at FROM lease_clock) RETURNING run_id`,
			`DELETE FROM ` + q + `.demo_session_lease WHERE account_id = p1 AND session_id = p2 AND run_id = p3 RETURNING run_id`},
		{"raw", `INSERT INTO ` + q + `.raw_leases AS held
  (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, released_at)
VALUES (p1, p2, p3, nextval('` + q + `.raw_seq'), now(), now(), now() + interval '15 seconds', NULL)
ON CONFLICT (account_id, session_id) DO UPDATE SET run_id = EXCLUDED.run_id,
  fence_token = nextval('` + q + `.raw_seq'), acquired_at = EXCLUDED.acquired_at,
  renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at, released_at = NULL
WHERE held.expires_at <= EXCLUDED.acquired_at RETURNING held.run_id`,
			`UPDATE ` + q + `.raw_leases SET released_at = now(), expires_at = now()
WHERE account_id = p1 AND session_id = p2 AND run_id = p3 AND released_at IS NULL RETURNING run_id`},
		{"manager", acquire, release},
	}
	for _, sd := range sides {
		proc := q + ".fencekit_bench_" + sd.name
		if _, err := pool.Exec(ctx, `CREATE PROCEDURE `+proc+`(n int, ep uuid, prefix text) LANGUAGE plpgsql AS $loop$
DECLARE p1 text := 'bench'; p2 text; p3 uuid; p4 bigint := 15000000; p5 text := NULL; p6 uuid := ep;
  q4 text := 'fencekit_bench_unheard'; q5 text := 'x'; r record;
BEGIN
  FOR i IN 1..n LOOP
    p2 := prefix || (i % 64)::text;
    p3 := gen_random_uuid();
    FOR r IN `+sd.acquire+` LOOP END LOOP;
    COMMIT;
    FOR r IN `+sd.release+` LOOP END LOOP;
    COMMIT;
  END LOOP;
END $loop$`); err != nil {
			b.Fatalf("%s: %v", sd.name, err)
		}
		b.Run(sd.name, func(b *testing.B) {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
				b.Fatal(err)
			}
			defer func() { _, _ = conn.Exec(ctx, "RESET synchronous_commit") }()
			call := "CALL " + proc + "($1, $2, $3)"
			// Warm the procedure's plans (generic after the fifth use) and the
			// table (its 64 rows and their HOT chains).
			if _, err := conn.Exec(ctx, call, pgx.QueryExecModeSimpleProtocol, 2000, epoch, sd.name); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if _, err := conn.Exec(ctx, call, pgx.QueryExecModeSimpleProtocol, b.N, epoch, sd.name); err != nil {
				b.Fatal(err)
			}
		})
	}
}
