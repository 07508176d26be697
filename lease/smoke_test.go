package lease_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/lease"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	_, err = m.Acquire(bg(), k)
	he, ok := isHeld(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, l.RunID(), he.RunID)
	st, err := m.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StatusHeld, st.Status)
	r, err := m.Renew(bg(), k, l.RunID())
	require.NoError(t, err)
	require.Equal(t, l.Token(), r.Token)
	res, err := l.Release(bg())
	require.NoError(t, err)
	require.Equal(t, lease.Released, res)
	res, err = l.Release(bg())
	require.NoError(t, err)
	require.Equal(t, lease.AlreadyReleased, res)
	l2, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())
	_ = l2
}
