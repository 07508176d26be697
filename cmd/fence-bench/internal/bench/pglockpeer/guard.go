package main

import (
	"context"
	"database/sql"
	"os"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
)

// pglockVersion names the library in the metrics' notes (go.mod pins it).
const pglockVersion = "cirello.io/pglock v1.16.1"

// guardMode runs bench.PGGuardVsLock with pglock as the lock library and
// prints its metrics as lines of JSON on standard output.
func guardMode(dsn string, quick, heartbeat bool) error {
	e := bench.StoreEnv(context.Background(), quick)
	e.DBURL = dsn
	lib := pglockVersion
	var opts []pglock.ClientOption
	if !heartbeat {
		lib += " (heartbeat off)"
		opts = append(opts, pglock.WithHeartbeatFrequency(0))
	}
	err := bench.PGGuardVsLock(e, lib, openPglock(dsn, opts...))
	if werr := bench.WriteMetricLines(os.Stdout, e.Report.Metrics); err == nil {
		err = werr
	}
	return err
}

// openPglock opens pglock as a user would protect a write with it: one
// client on lib/pq with default options (lease and heartbeat) plus opts, its table
// created in the bench's schema (unquoted table name: pglock appends
// "_rvn" for its sequence), and the lock taken with FailIfLocked (the
// bench is the only writer, so a lock not obtained is an error).
func openPglock(dsn string, opts ...pglock.ClientOption) bench.OpenWriteLock {
	return func(ctx context.Context, schema string) (bench.WriteLock, func() error, error) {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			return nil, nil, err
		}
		// Room for the lock's heartbeat goroutine beside the acquire and
		// release, as database/sql's default pool would give it.
		db.SetMaxOpenConns(4)
		db.SetMaxIdleConns(4)
		c, err := pglock.New(db, append([]pglock.ClientOption{pglock.WithCustomTable(pgx.Identifier{schema}.Sanitize() + ".pglock_locks")}, opts...)...)
		if err == nil {
			err = c.CreateTable()
		}
		if err != nil {
			_ = db.Close()
			return nil, nil, err
		}
		lock := func(ctx context.Context) (func(context.Context) error, error) {
			l, err := c.AcquireContext(ctx, "doc", pglock.FailIfLocked())
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return c.ReleaseContext(ctx, l) }, nil
		}
		return lock, db.Close, nil
	}
}
