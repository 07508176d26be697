package bench

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
)

// TestPGGuardVsLock runs the comparison with a lock of PostgreSQL's own (a
// session advisory lock on a connection of its own) and checks that every
// locked write took the lock and released it once, that the lock was
// opened in the bench's schema and closed, and that every key is reported
// with a finite ratio.
func TestPGGuardVsLock(t *testing.T) {
	fencetest.Pool(t) // fails under CI when PostgreSQL is missing
	e := StoreEnv(context.Background(), true)
	e.DBURL = fencetest.DatabaseURL()
	var locks, releases, closed atomic.Int64
	var schemaSeen string
	open := func(ctx context.Context, schema string) (WriteLock, func() error, error) {
		schemaSeen = schema
		p, err := pgxpool.New(ctx, e.DBURL)
		if err != nil {
			return nil, nil, err
		}
		lock := func(ctx context.Context) (func(context.Context) error, error) {
			c, err := p.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := c.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
				c.Release()
				return nil, err
			}
			locks.Add(1)
			return func(ctx context.Context) error {
				defer c.Release()
				var ok bool
				if err := c.QueryRow(ctx, `SELECT pg_advisory_unlock(4242)`).Scan(&ok); err != nil {
					return err
				}
				if !ok {
					return errors.New("advisory lock was not held")
				}
				releases.Add(1)
				return nil
			}, nil
		}
		return lock, func() error { closed.Add(1); p.Close(); return nil }, nil
	}
	require.NoError(t, PGGuardVsLock(e, "advisory lock", open))
	assert.NotEmpty(t, schemaSeen)
	assert.Equal(t, int64(1), closed.Load())
	assert.Equal(t, locks.Load(), releases.Load(), "every lock released")
	assert.GreaterOrEqual(t, locks.Load(), int64(101), "warm-up and at least 100 rounds in quick mode")
	for _, k := range PGLockGuardKeys {
		m, ok := e.Report.Get(k)
		require.True(t, ok, k)
		assert.False(t, math.IsNaN(m.Value) || math.IsInf(m.Value, 0), k)
		assert.Positive(t, m.Value, k)
	}
}

// TestPGGuardVsLockOpenFails reports every key as not measured when the
// lock library cannot be opened.
func TestPGGuardVsLockOpenFails(t *testing.T) {
	fencetest.Pool(t)
	e := StoreEnv(context.Background(), true)
	e.DBURL = fencetest.DatabaseURL()
	boom := errors.New("boom")
	err := PGGuardVsLock(e, "broken", func(context.Context, string) (WriteLock, func() error, error) { return nil, nil, boom })
	require.ErrorIs(t, err, boom)
	for _, k := range PGLockGuardKeys {
		m, ok := e.Report.Get(k)
		require.True(t, ok, k)
		assert.True(t, math.IsNaN(m.Value), k)
	}
}
