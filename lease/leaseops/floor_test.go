package leaseops_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
	"github.com/fencekit/fencekit/lease/leaseops"
	"github.com/fencekit/fencekit/sql/migrations"
)

// snapshot is a copy of the lease table and the sequence, as a backup taken
// at some point would hold.
type snapshot struct {
	table string
	last  int64
	iscal bool
}

func (e *env) backup() snapshot {
	e.t.Helper()
	s := snapshot{table: fencetest.RandomName("fk_backup_")}
	_, err := e.raw.Exec(bg(), fmt.Sprintf(`CREATE TABLE %q.%s AS SELECT * FROM %q.fencekit_leases`, e.schema, s.table, e.schema))
	require.NoError(e.t, err)
	s.last, s.iscal = e.seq()
	return s
}

// restore puts the table and the sequence back to the snapshot, as a
// restore of that backup (or a failover to a replica that stopped there)
// would. The stored token floor is restored with them (it was 0).
func (e *env) restore(s snapshot) {
	e.t.Helper()
	for _, q := range []string{
		fmt.Sprintf(`UPDATE %q.fencekit_token_floor SET floor = 0`, e.schema),
		fmt.Sprintf(`DELETE FROM %q.fencekit_leases`, e.schema),
		fmt.Sprintf(`INSERT INTO %q.fencekit_leases SELECT * FROM %q.%s`, e.schema, e.schema, s.table),
	} {
		_, err := e.raw.Exec(bg(), q)
		require.NoError(e.t, err)
	}
	_, err := e.raw.Exec(bg(), `SELECT setval($1::regclass, $2, $3)`, e.schema+".fencekit_token_seq", s.last, s.iscal)
	require.NoError(e.t, err)
}

// floor is the schema's token floor procedures with src as the source.
func (e *env) floor(src lease.FloorSource) *leaseops.TokenFloor {
	e.t.Helper()
	f, err := leaseops.NewTokenFloor(leaseops.TokenFloorConfig{Pool: fencetest.Pool(e.t), Schema: e.schema, Source: src})
	require.NoError(e.t, err)
	return f
}

// advance runs the recovery (leaseops.CheckFloor) on the schema with src as
// the source.
func (e *env) advance(src lease.FloorSource) (leaseops.FloorReport, error) {
	return leaseops.CheckFloor(bg(), e.raw, e.schema, lease.FloorConfig{Source: src})
}

// TestTokenFloorAfterRestore: failing, then fixed. Leases are granted and
// their tokens accepted by a PostgreSQL guard in another schema; the lease
// schema is then restored from an earlier backup. First the hazard: with
// nothing checking, a new grant re-issues a token the guard has already
// accepted from another run (and a guard admits it as "the same run"). Then
// the fix: the floor check (guard marks as the floor source) detects the
// stale sequence and makes the database refuse every grant at or below the
// floor, for new keys and for takeovers of existing rows; CheckFloor
// moves the sequence past the floor, and grants carry larger tokens again.
func TestTokenFloorAfterRestore(t *testing.T) {
	e := newEnv(t)
	guardSchema := fencetest.Schema(t, migrations.Guard)
	gpool := fencetest.Pool(t)
	g, err := pgguard.New(pgguard.Config{DB: gpool, Schema: guardSchema})
	require.NoError(t, err)
	marks, err := pgguard.NewMarks(pgguard.MarksConfig{DB: gpool, Schema: guardSchema})
	require.NoError(t, err)
	mt := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	m := e.manager(lease.Config{MeterProvider: mt.Provider, Logger: logger})
	tf := e.floor(lease.MaxFloor(marks.Highest, lease.StaticFloor(0)))
	write := func(ctx context.Context) error { return nil }

	old := uniqueKey(t) // acquired before the backup, released after it
	lo, err := m.Acquire(bg(), old)
	require.NoError(t, err)
	snap := e.backup()
	_, err = lo.Release(bg())
	require.NoError(t, err)
	var highest fence.Token
	resources := map[fence.Token]string{}
	for range 4 {
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		res := "doc/" + uuid.NewString()
		require.NoError(t, g.Fence(bg(), res, l.Token(), write))
		resources[l.Token()] = res
		highest = max(highest, l.Token())
		_, err = l.Release(bg())
		require.NoError(t, err)
	}
	rep, err := tf.Check(bg())
	require.NoError(t, err, "healthy before the restore")
	require.Equal(t, highest, rep.Source)
	require.Greater(t, rep.Next, highest)

	// The hazard: restore, and grant without any check.
	e.restore(snap)
	unchecked := e.manager(lease.Config{})
	l, err := unchecked.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	require.LessOrEqual(t, l.Token(), highest, "a restored sequence re-issues old tokens")
	if res, ok := resources[l.Token()]; ok {
		require.NoError(t, g.Fence(bg(), res, l.Token(), write),
			"the guard takes the re-issued token for the run it accepted it from")
	}
	_, err = l.Release(bg())
	require.NoError(t, err)

	// Detection.
	e.restore(snap)
	e.expire(old) // its holder died meanwhile: a takeover would be due
	rep, err = tf.Check(bg())
	require.ErrorIs(t, err, lease.ErrTokenFloor)
	var fe *lease.TokenFloorError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, highest, fe.Floor)
	require.Equal(t, rep.Next, fe.Token)
	require.LessOrEqual(t, rep.Next, highest)
	require.Equal(t, highest, rep.Stored, "the floor is stored for every Manager")
	require.False(t, rep.OK())

	// Refusal, on both paths, by any Manager on the schema, leaving no row.
	rows := e.rowCount()
	for _, k := range []lease.Key{uniqueKey(t), old} {
		for _, mgr := range []*lease.Manager{m, unchecked} {
			_, err := mgr.Acquire(bg(), k)
			require.ErrorIs(t, err, lease.ErrTokenFloor, "key %s", k)
			require.ErrorAs(t, err, &fe)
			require.Equal(t, highest, fe.Floor)
			require.LessOrEqual(t, fe.Token, highest)
		}
	}
	require.Equal(t, rows, e.rowCount(), "refused grants write no row")
	st, err := m.Inspect(bg(), old)
	require.NoError(t, err)
	require.Equal(t, lo.RunID(), st.RunID, "the old key's row is untouched")
	require.EqualValues(t, 2, obstest.Value(mt.Collect(), leasemetrics.Refused, map[string]string{"reason": leasemetrics.ReasonTokenFloor}))
	warns := logs.AtLeast(slog.LevelWarn)
	require.NotEmpty(t, warns)
	require.Contains(t, warns[len(warns)-1].Message, "token floor")

	// The fix.
	rep, err = e.advance(lease.MaxFloor(marks.Highest, lease.StaticFloor(0)))
	require.NoError(t, err)
	require.Equal(t, highest+1, rep.Next)
	rep, err = tf.Check(bg())
	require.NoError(t, err)
	require.True(t, rep.OK())
	for _, k := range []lease.Key{uniqueKey(t), old} {
		l, err := unchecked.Acquire(bg(), k)
		require.NoError(t, err)
		require.Greater(t, l.Token(), highest)
		for _, res := range resources {
			require.NoError(t, g.Fence(bg(), res, l.Token(), write), "guards accept the new tokens")
		}
		_, err = l.Release(bg())
		require.NoError(t, err)
	}

	// Never backwards: a lower floor changes neither the floor nor the sequence.
	before, _ := e.seq()
	rep, err = e.advance(lease.MaxFloor(marks.Highest, lease.StaticFloor(1)))
	require.NoError(t, err)
	after, _ := e.seq()
	require.Equal(t, before, after)
	nowHighest, err := marks.Highest(bg())
	require.NoError(t, err)
	require.Greater(t, nowHighest, highest)
	require.Equal(t, nowHighest, rep.Stored, "the stored floor follows the guard marks up, never down to 1")
	rep, err = e.advance(lease.StaticFloor(1))
	require.NoError(t, err)
	require.Equal(t, nowHighest, rep.Stored, "nor down to a source below the stored floor")
	require.Zero(t, rep.AdvancedFrom)
}

// TestTokenFloorAdvanceConcurrent: advancing the sequence (CheckFloor)
// while several processes acquire and release never re-issues a token (all
// tokens are distinct) and every grant that starts after an advance
// returned carries a token above its floor.
func TestTokenFloorAdvanceConcurrent(t *testing.T) {
	e := newEnv(t)
	admin := e.floor(lease.StaticFloor(0))
	const workers, rounds = 4, 25
	var (
		mu     sync.Mutex
		tokens = map[fence.Token]bool{}
		dup    []fence.Token
		below  []string
		floor  fence.Token // last floor whose advance returned
		wg     sync.WaitGroup
	)
	errs := make(chan error, workers+1)
	for w := range workers {
		m := e.manager(lease.Config{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				mu.Lock()
				f := floor
				mu.Unlock()
				l, err := m.Acquire(bg(), lease.Key{AccountID: fmt.Sprintf("w%d", w), SessionID: fmt.Sprint(i)})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if tokens[l.Token()] {
					dup = append(dup, l.Token())
				}
				tokens[l.Token()] = true
				if l.Token() <= f {
					below = append(below, fmt.Sprintf("%d <= %d", l.Token(), f))
				}
				mu.Unlock()
				if _, err := l.Release(bg()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= 10; i++ {
			target := fence.Token(i * 1000)
			if _, err := e.advance(lease.StaticFloor(target)); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			floor = target
			mu.Unlock()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, dup, "re-issued tokens")
	require.Empty(t, below, "grants below a floor already advanced to")
	require.Len(t, tokens, workers*rounds)
	rep, err := admin.Check(bg())
	require.NoError(t, err)
	require.EqualValues(t, 10000, rep.Stored)
	require.Greater(t, rep.Next, fence.Token(10000))
}
