package lease_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/lease"
)

const (
	contenders = 8
	rounds     = 500
)

// contend runs rounds of simultaneous Acquire calls by contenders Managers,
// each on its own pool, released together by a barrier. keyFor gives the
// round's key; after each round the winner releases. It returns the
// winners' tokens in round order.
func contend(t *testing.T, e *env, keyFor func(round int) lease.Key) []int64 {
	t.Helper()
	ms := make([]*lease.Manager, contenders)
	for i := range ms {
		ms[i] = e.manager(lease.Config{})
	}
	type result struct {
		l   *lease.Lease
		err error
	}
	var (
		start  = make([]chan struct{}, rounds)
		wg     sync.WaitGroup
		res    = make([][]result, rounds)
		tokens = make([]int64, 0, rounds)
	)
	for r := range start {
		start[r] = make(chan struct{})
		res[r] = make([]result, contenders)
	}
	for r := 0; r < rounds; r++ {
		k := keyFor(r)
		wg.Add(contenders)
		for i, m := range ms {
			go func() {
				defer wg.Done()
				<-start[r]
				l, err := m.Acquire(bg(), k)
				res[r][i] = result{l, err}
			}()
		}
		close(start[r]) // the barrier: all contenders go at once
		wg.Wait()

		var winners []*lease.Lease
		for i, x := range res[r] {
			if x.err == nil {
				winners = append(winners, x.l)
				continue
			}
			he, ok := isHeld(x.err)
			require.Truef(t, ok, "round %d contender %d: unexpected error %v", r, i, x.err)
			require.True(t, errors.Is(x.err, lease.ErrHeld))
			require.Equal(t, k, he.Key)
		}
		require.Lenf(t, winners, 1, "round %d: want exactly one winner", r)
		w := winners[0]
		for i, x := range res[r] {
			if he, ok := isHeld(x.err); ok && he.RunID != uuid.Nil {
				require.Equalf(t, w.RunID(), he.RunID, "round %d contender %d was told the wrong holder", r, i)
				require.Equal(t, w.Token(), he.Token)
			}
		}
		got, ok := e.row(k)
		require.True(t, ok)
		require.Equal(t, w.RunID(), got.RunID, "the row names the winner")
		require.Equal(t, int64(w.Token()), got.Token)
		tokens = append(tokens, int64(w.Token()))
		rr, err := w.Release(bg())
		require.NoError(t, err)
		require.Equal(t, lease.ReleaseDone, rr)
	}
	return tokens
}

// TestContentionFreshKeys: 8 contenders × 500 rounds race for a key that has
// no row yet (the INSERT path); exactly one wins each round.
func TestContentionFreshKeys(t *testing.T) {
	e := newEnv(t)
	begin := time.Now()
	acct := "acct-" + uuid.NewString()
	tokens := contend(t, e, func(r int) lease.Key { return lease.Key{AccountID: acct, SessionID: fmt.Sprint("s", r)} })
	require.Len(t, tokens, rounds)
	require.Equal(t, rounds, e.rowCount())
	t.Logf("%d contenders × %d rounds (fresh keys): exactly one winner every round, %s", contenders, rounds, time.Since(begin))
}

// TestContentionHotKey: 8 contenders × 500 rounds race for the same key,
// released by the previous round's winner (the ON CONFLICT DO UPDATE path);
// exactly one wins each round and the tokens strictly increase.
func TestContentionHotKey(t *testing.T) {
	e := newEnv(t)
	begin := time.Now()
	k := uniqueKey(t)
	tokens := contend(t, e, func(int) lease.Key { return k })
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "round %d", i)
	}
	require.Equal(t, 1, e.rowCount(), "release keeps the single row")
	t.Logf("%d contenders × %d rounds (one hot key): exactly one winner every round, tokens increasing, %s", contenders, rounds, time.Since(begin))
}
