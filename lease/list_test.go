package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/lease"
)

// TestList, in every exec mode: keys come back in (account, session) order
// with the states Inspect reports; the account and held filters select;
// pages continued with After concatenate to the whole list; bad options
// are refused before any statement.
func TestList(t *testing.T) {
	for _, mode := range everyExecMode {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			holder := e.manager(lease.Config{})
			op := e.manager(lease.Config{Pool: poolInMode(t, mode)})
			k := func(a, s string) lease.Key { return lease.Key{AccountID: a, SessionID: s} }
			held := []lease.Key{k("acme", "s1"), k("acme", "s4"), k("beta", "s2")}
			for _, key := range held {
				_, err := holder.Acquire(bg(), key, lease.WithHolder("worker"))
				require.NoError(t, err)
			}
			rel, err := holder.Acquire(bg(), k("acme", "s2"))
			require.NoError(t, err)
			_, err = rel.Release(bg())
			require.NoError(t, err)
			_, err = holder.Acquire(bg(), k("acme", "s3"))
			require.NoError(t, err)
			e.expire(k("acme", "s3"))

			all, err := op.List(bg())
			require.NoError(t, err)
			var keys []lease.Key
			states := map[lease.Key]lease.State{}
			for _, o := range all {
				keys = append(keys, o.Key)
				states[o.Key] = o.State
				want, err := op.Inspect(bg(), o.Key)
				require.NoError(t, err)
				require.Equal(t, want.RunID, o.RunID)
				require.Equal(t, want.Token, o.Token)
				require.Equal(t, want.State, o.State)
				require.Equal(t, want.Holder, o.Holder)
				require.Equal(t, want.ExpiresAt, o.ExpiresAt)
			}
			require.Equal(t, []lease.Key{k("acme", "s1"), k("acme", "s2"), k("acme", "s3"), k("acme", "s4"), k("beta", "s2")}, keys)
			require.Equal(t, lease.StateReleased, states[k("acme", "s2")])
			require.Equal(t, lease.StateExpired, states[k("acme", "s3")])
			require.Equal(t, lease.StateHeld, states[k("beta", "s2")])
			require.Positive(t, all[0].Remaining)
			require.Equal(t, "worker", all[0].Holder)

			only, err := op.List(bg(), lease.WithAccount("acme"), lease.WithHeldOnly())
			require.NoError(t, err)
			require.Len(t, only, 2)
			require.Equal(t, k("acme", "s1"), only[0].Key)
			require.Equal(t, k("acme", "s4"), only[1].Key)
			none, err := op.List(bg(), lease.WithAccount("nobody"))
			require.NoError(t, err)
			require.Empty(t, none)

			var paged []lease.Key
			var after lease.Key
			for pages := 0; ; pages++ {
				require.Less(t, pages, 5)
				page, err := op.List(bg(), lease.WithLimit(2), lease.WithAfter(after))
				require.NoError(t, err)
				for _, o := range page {
					paged = append(paged, o.Key)
				}
				if len(page) < 2 {
					break
				}
				after = page[len(page)-1].Key
			}
			require.Equal(t, keys, paged)

			for name, bad := range map[string]lease.Option{
				"zero limit":     lease.WithLimit(0),
				"negative limit": lease.WithLimit(-1),
				"huge limit":     lease.WithLimit(lease.MaxBatch + 1),
				"bad account":    lease.WithAccount("a\nb"),
				"half after":     lease.WithAfter(lease.Key{AccountID: "acme"}),
				"grant option":   lease.WithHolder("desktop"),
				"watch option":   lease.WithWatchPoll(time.Second),
			} {
				_, err := op.List(bg(), bad)
				require.ErrorIs(t, err, lease.ErrInvalidOption, name)
			}
		})
	}
}
