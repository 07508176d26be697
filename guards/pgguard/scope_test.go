package pgguard_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
)

// TestStrictRefusesAnotherKeysResource: a write made under key B's claim
// to acme/conv-1/notes, a resource of key A (claims as a lease builds
// them: token, run, and the key's scope). Without Strict it is accepted and
// raises the mark to B's token, after which A's valid writes are stale.
// With Strict it is refused with a *fence.ScopeError, nothing is written,
// and A keeps writing.
func TestStrictRefusesAnotherKeysResource(t *testing.T) {
	loose, strict := setupSchema(t), setupSchema(t)
	ctx := testCtx(t)
	resA := fence.JoinResource("acme", "conv-1", "notes")
	claimA := fence.Claim{Token: 7, Run: "run-a", Scope: fence.JoinResource("acme", "conv-1")}
	claimB := fence.Claim{Token: 40, Run: "run-b", Scope: fence.JoinResource("acme", "conv-2")}
	write := func(g *pgguard.Guard, schema string, c fence.Claim, v string) error {
		return g.InTx(fence.WithClaim(ctx, c), resA, func(ctx context.Context, tx pgx.Tx) error {
			return rowWriter(schema, resA, v, int64(c.Token), false)(ctx, tx)
		})
	}

	t.Run("not strict: the hazard", func(t *testing.T) {
		schema := loose
		g := newGuard(t, pgguard.Config{Schema: schema, DB: fencetest.Pool(t)})
		require.NoError(t, write(g, schema, claimA, "a1"))
		require.NoError(t, write(g, schema, claimB, "b"), "another key's claim raises this key's mark")
		require.ErrorIs(t, write(g, schema, claimA, "a2"), fence.ErrStale, "A's valid write is now stale")
	})

	t.Run("strict", func(t *testing.T) {
		schema := strict
		g := newGuard(t, pgguard.Config{Schema: schema, DB: fencetest.Pool(t), Strict: true})
		require.NoError(t, write(g, schema, claimA, "a1"))
		err := write(g, schema, claimB, "b")
		require.ErrorIs(t, err, fence.ErrOutOfScope)
		se, ok := fence.IsOutOfScope(err)
		require.True(t, ok)
		require.Equal(t, fence.ScopeError{Resource: resA, Scope: claimB.Scope}, *se)
		mark, err := g.Mark(ctx, resA)
		require.NoError(t, err)
		require.Equal(t, claimA.Token, mark.Token, "the mark.Token did not move")
		require.NoError(t, write(g, schema, claimA, "a2"), "A keeps writing")
		v, tok, _, err := readRow(ctx, fencetest.Pool(t), schema, resA)
		require.NoError(t, err)
		require.Equal(t, "a2", v)
		require.Equal(t, claimA.Token, tok)
		// A claim without a scope (a token from elsewhere) is refused too.
		require.ErrorIs(t, write(g, schema, fence.Claim{Token: 50}, "x"), fence.ErrOutOfScope)
	})
}
