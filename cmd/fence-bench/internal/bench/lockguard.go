package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/sql/migrations"
)

// PGLockGuardKeys are the metrics PGGuardVsLock reports, set to NaN when
// the case fails before reporting them.
var PGLockGuardKeys = []string{"pg_guard_vs_pglock_ratio", "pglock_write_ratio", "pg_guard_pglock_run_intx_ratio", "pglock_write_us"}

// WriteLock takes a lock library's lock on the one resource the
// comparison writes and returns its release.
type WriteLock func(ctx context.Context) (release func(context.Context) error, err error)

// OpenWriteLock prepares a lock library inside schema (its table, its
// client) and returns the WriteLock and a close function.
type OpenWriteLock func(ctx context.Context, schema string) (WriteLock, func() error, error)

// PGGuardVsLock measures pgguard's marks mode against the same write
// protected by a lock library, on PostgreSQL: three sides interleaved
// operation by operation (order rotated each round) on one pgx connection
// for the writes: the unguarded BEGIN + one-row upsert + COMMIT; Guard.InTx
// with the claim in the context (a new token per write) around the same
// upsert; and the lock library's lock taken (open, in the bench's schema,
// through the library's own connection), the same unguarded transaction,
// and the lock released. lib names the library in the notes. The peer
// module that can import the library (pglockpeer) calls it.
func PGGuardVsLock(e *Env, lib string, open OpenWriteLock) (err error) {
	defer func() {
		if err != nil {
			e.nullMissing(PGLockGuardKeys, "failed: pg_guard_pglock")
		}
	}()
	schema, drop, err := e.schema(migrations.Guard)
	if err != nil {
		return err
	}
	defer drop()
	pool, err := e.pool(1, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx := e.Ctx
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+q+`.guarded (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`); err != nil {
		return err
	}
	upsert := `INSERT INTO ` + q + `.guarded (resource, value, token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	if err != nil {
		return err
	}
	lock, closeLock, err := open(ctx, schema)
	if err != nil {
		return fmt.Errorf("%s: %w", lib, err)
	}
	defer func() { _ = closeLock() }()
	run := benchRun()
	var tok fence.Token
	plainTx := func(r string, t fence.Token) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, upsert, r, "value", int64(t)); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	const (
		plain = iota
		inTx
		locked
	)
	ops := []Op{
		plain: {"plain tx", func(int) error { tok++; return plainTx("plain", tok) }},
		inTx: {"pgguard InTx", func(int) error {
			tok++
			c := fence.Claim{Token: tok, Run: run}
			return g.InTx(fence.WithClaim(ctx, c), "intx", func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upsert, "intx", "value", int64(c.Token))
				return err
			})
		}},
		locked: {lib + " lock + tx + release", func(int) error {
			release, err := lock(ctx)
			if err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			tok++
			werr := plainTx("locked", tok)
			if rerr := release(ctx); werr == nil && rerr != nil {
				werr = fmt.Errorf("release: %w", rerr)
			}
			return werr
		}},
	}
	rounds, dur := e.rounds()
	minRounds := 300
	if e.Quick {
		minRounds = 100
	}
	in, err := Interleave(ops, minRounds, time.Now().Add(time.Duration(rounds)*dur))
	if err != nil {
		return err
	}
	e.Report.Add(GuardRatio(in, "pg_guard_vs_pglock_ratio", inTx, locked, 1, fmt.Sprintf(
		"marks mode, pgx: InTx+write vs %s lock, the same BEGIN+write+COMMIT (pgx), release: below 1 the guard is faster; %d rounds of 3 sides interleaved, median of %d blocks",
		lib, in.Rounds(), RatioBlocks)))
	e.Report.Add(GuardRatio(in, "pglock_write_ratio", locked, plain, 0, lib+" lock + BEGIN+write+COMMIT + release vs the unguarded transaction"))
	e.Report.Add(GuardRatio(in, "pg_guard_pglock_run_intx_ratio", inTx, plain, 0, "marks mode, pgx: InTx+write vs the unguarded transaction, in this case's run (pg_guard's pg_guard_intx_ratio is the case with the target)"))
	e.Report.Add(Metric{Key: "pglock_write_us", Value: float64(in.PerOp(locked)) / 1e3, Unit: "µs", Note: lib + " lock + unguarded transaction + release"})
	return nil
}
