package lease_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// TestKeyScope: a key's Scope contains every name its Resource builds and
// none that another key's Resource builds, also when ids hold '/'.
func TestKeyScope(t *testing.T) {
	keys := []lease.Key{
		{AccountID: "a/b", SessionID: "c"},
		{AccountID: "a", SessionID: "b/c"},
		{AccountID: "a", SessionID: "b"},
		{AccountID: "a", SessionID: "bc"},
		{AccountID: "a%2Fb", SessionID: "c"},
		{AccountID: "..", SessionID: "."},
		{AccountID: "acme", SessionID: "conv-1"},
	}
	for i, k := range keys {
		require.NoError(t, fence.ValidateScope(k.Scope()), "key %d", i)
		for _, name := range []string{"notes", "", "c/reports", ".."} {
			for j, other := range keys {
				r := other.Resource(name)
				require.Equal(t, i == j, fence.InScope(k.Scope(), r), "scope of key %d (%q), resource of key %d (%q)", i, k.Scope(), j, r)
			}
		}
	}
	require.Equal(t, "acme/conv-1", lease.Key{AccountID: "acme", SessionID: "conv-1"}.Scope())
}
