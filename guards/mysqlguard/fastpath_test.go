package mysqlguard

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestInRowEqualTokenRules: in-row writes at the mark's own token follow
// fence.DecideClaim and fence.NextMark whichever form of the upsert
// decides them (the fast form admits a higher token or the same run again;
// the rest goes to the whole rule): a claim without run is admitted and
// keeps the stored run, a run over an empty stored run is admitted and
// stored, another run is refused as reused, a lower token as stale.
func TestInRowEqualTokenRules(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	rows := f.inRow(t, RowsConfig{})
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
		err := rows.UpsertClaim(ctx, f.db, []any{res}, step.claim, step.value)
		switch {
		case step.want == nil && err != nil, step.want != nil && !errors.Is(err, step.want):
			t.Fatalf("step %d, claim %+v: %v, want %v", i, step.claim, err, step.want)
		}
		var (
			v   string
			tok int64
			run string
		)
		if err := f.db.QueryRowContext(ctx, "SELECT value, fence_token, fence_run FROM "+f.rows+" WHERE resource = ?", res).Scan(&v, &tok, &run); err != nil {
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
