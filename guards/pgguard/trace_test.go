package pgguard_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestWriteSpans: Fence, InTx, FenceTx and Rows.Upsert each record one
// "fencekit.guard.write" span, a child of the span in ctx, with the claim and
// outcome; a stale refusal is an outcome (status Unset); a strict guard's
// out-of-scope refusal, decided before any I/O, is a span too.
func TestWriteSpans(t *testing.T) {
	schema := setupSchema(t)
	pool := fencetest.Pool(t)
	spans := obstest.NewSpans(t)
	g := newGuard(t, pgguard.Config{DB: pool, Schema: schema, TracerProvider: spans.Provider, Strict: true})
	ctx, caller := spans.Start(bg(), "tool-call")
	claim := func(tok fence.Token) fence.Claim { return fence.Claim{Token: tok, Run: "run-1", Scope: "acct"} }
	const res = "acct/doc"

	require.NoError(t, g.Fence(fence.WithClaim(ctx, claim(5)), res, 5, writeRow(schema, res, "v5", 5)))
	require.NoError(t, g.InTx(fence.WithClaim(ctx, claim(6)), res, func(context.Context, pgx.Tx) error { return nil }))
	tx, err := pool.Begin(bg())
	require.NoError(t, err)
	require.ErrorIs(t, g.FenceTx(fence.WithClaim(ctx, claim(4)), tx, res), fence.ErrStale) // rolls tx back
	require.ErrorIs(t, g.FenceTx(fence.WithClaim(ctx, claim(7)), tx, "other/doc"), fence.ErrOutOfScope)

	got := spans.Ended("fencekit.guard.write")
	require.Len(t, got, 4)
	for i, want := range []struct {
		tok           string
		res, outcome  string
		mark, notSent string
	}{
		{"5", res, "accepted", "", ""},
		{"6", res, "accepted", "", ""},
		{"4", res, "stale", "6", ""},
		{"7", "other/doc", "out_of_scope", "", "true"},
	} {
		a := obstest.SpanAttrs(got[i])
		require.True(t, obstest.ChildOf(got[i], caller.SpanContext()), "span %d", i)
		require.Equal(t, "postgres", a["fencekit.guard.kind"])
		require.Equal(t, want.res, a["fencekit.guard.resource"])
		require.Equal(t, want.tok, a["fencekit.guard.token"])
		require.Equal(t, "run-1", a["fencekit.guard.run_id"])
		require.Equal(t, want.outcome, a["fencekit.guard.outcome"], "span %d", i)
		require.Equal(t, want.mark, a["fencekit.guard.mark.token"], "span %d", i)
		require.Equal(t, want.notSent, a["fencekit.guard.before_write"], "span %d", i)
		require.Equal(t, codes.Unset, got[i].Status().Code, "span %d", i)
	}

	// Rows: one span per upsert.
	_, err = pool.Exec(bg(), `CREATE TABLE "`+schema+`".docs (id text PRIMARY KEY, body text NOT NULL, fence_token bigint NOT NULL)`)
	require.NoError(t, err)
	rows, err := pgguard.NewRows(pgguard.RowsConfig{Schema: schema, Table: "docs", Key: []string{"id"},
		Columns: []string{"body"}, TracerProvider: spans.Provider})
	require.NoError(t, err)
	require.NoError(t, rows.Upsert(fence.WithClaim(ctx, claim(9)), pool, []any{"d1"}, "x"))
	require.ErrorIs(t, rows.Upsert(fence.WithClaim(ctx, claim(8)), pool, []any{"d1"}, "y"), fence.ErrStale)
	got = spans.Ended("fencekit.guard.write")
	require.Len(t, got, 6)
	require.Equal(t, "accepted", obstest.SpanAttrs(got[4])["fencekit.guard.outcome"])
	require.Equal(t, "stale", obstest.SpanAttrs(got[5])["fencekit.guard.outcome"])
	require.Equal(t, "d1", obstest.SpanAttrs(got[5])["fencekit.guard.resource"])
	require.True(t, obstest.ChildOf(got[5], caller.SpanContext()))
}
