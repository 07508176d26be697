package mysqlguard

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestInRowEqualTokenRules: in-row writes at the mark's own token follow
// fence.DecideClaim and fence.NextMark (decided over the row read back
// after the upsert): a claim without run is admitted and
// keeps the stored run, a run over an empty stored run is admitted and
// stored, another run is refused as reused, a lower token as stale.
//
// It runs on the fixture's table (run column VARBINARY(64)) and on one
// whose run column is VARCHAR(64) in utf8mb4 with a case-insensitive
// collation, where the run is still compared byte for byte.
func TestInRowEqualTokenRules(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	t.Run("varbinary", func(t *testing.T) { equalTokenRules(ctx, t, f, f.inRow(t, RowsConfig{}), f.rows) })
	t.Run("varchar", func(t *testing.T) {
		table := randomName("fk_rows_vc_")
		if _, err := f.db.ExecContext(ctx, "CREATE TABLE "+table+" (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(255) NOT NULL, "+
			"fence_token BIGINT NOT NULL, fence_run VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL DEFAULT '') ENGINE=InnoDB"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = f.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table) })
		rows, err := NewRows(RowsConfig{Table: table, Key: []string{"resource"}, Columns: []string{"value"}, RunColumn: "fence_run"})
		if err != nil {
			t.Fatal(err)
		}
		equalTokenRules(ctx, t, f, rows, table)
	})
}

func equalTokenRules(ctx context.Context, t *testing.T, f fixture, rows *Rows, table string) {
	const res = "equal-token"
	for i, step := range []struct {
		claim   fence.Claim
		value   string
		want    error // nil, fence.ErrStale or fence.ErrTokenReused
		wantTok int64
		wantRun string
	}{
		{fence.Claim{Token: 5, Run: "run-a"}, "v1", nil, 5, "run-a"},
		{fence.Claim{Token: 5, Run: "run-a"}, "v2", nil, 5, "run-a"},
		{fence.Claim{Token: 5}, "v3", nil, 5, "run-a"},
		{fence.Claim{Token: 5, Run: "run-b"}, "x", fence.ErrTokenReused, 5, "run-a"},
		{fence.Claim{Token: 4, Run: "run-a"}, "x", fence.ErrStale, 5, "run-a"},
		{fence.Claim{Token: 6}, "v4", nil, 6, ""},
		{fence.Claim{Token: 6}, "v5", nil, 6, ""},
		{fence.Claim{Token: 6, Run: "run-c"}, "v6", nil, 6, "run-c"},
		{fence.Claim{Token: 6, Run: "RUN-C"}, "x", fence.ErrTokenReused, 6, "run-c"},
	} {
		err := rows.Upsert(fence.WithClaim(ctx, step.claim), f.db, []any{res}, step.value)
		switch {
		case step.want == nil && err != nil, step.want != nil && !errors.Is(err, step.want):
			t.Fatalf("step %d, claim %+v: %v, want %v", i, step.claim, err, step.want)
		}
		var (
			v   string
			tok int64
			run string
		)
		if err := f.db.QueryRowContext(ctx, "SELECT value, fence_token, fence_run FROM "+table+" WHERE resource = ?", res).Scan(&v, &tok, &run); err != nil {
			t.Fatal(err)
		}
		if tok != step.wantTok || run != step.wantRun {
			t.Fatalf("step %d, claim %+v: row (%d, %q), want (%d, %q)", i, step.claim, tok, run, step.wantTok, step.wantRun)
		}
		if step.want == nil && v != step.value {
			t.Fatalf("step %d: value %q, want %q", i, v, step.value)
		}
	}
}
