package mysqlguard

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestCorruptMarks: a marks row or an in-row token/run the guard did not
// write refuses the write with a *fence.ForeignError and writes nothing: a token
// below 1 refuses every write; a malformed run refuses writes at its token
// (the only ones its run decides), while a higher token replaces it.
func TestCorruptMarks(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := f.guard(t, Config{DB: f.db})
	rows := f.inRow(t, RowsConfig{})
	ms := marksSubject{f: f, g: g, db: f.db}
	rs := rowsSubject{f: f, r: rows, db: f.db}
	for i, bad := range []struct {
		tok int64
		run string
	}{{0, ""}, {-5, ""}, {7, "bad run"}, {7, "semi;colon"}, {7, "nul\x00"}, {7, "ünï"}} {
		r := "corrupt/" + string(rune('a'+i))
		if _, err := f.db.ExecContext(ctx, "INSERT INTO "+f.marks+" (resource, token, run) VALUES (?, ?, ?)", r, bad.tok, bad.run); err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.ExecContext(ctx, "INSERT INTO "+f.rows+" (resource, value, fence_token, fence_run) VALUES (?, 'old', ?, ?)", r, bad.tok, bad.run); err != nil {
			t.Fatal(err)
		}
		toks := []fence.Token{1, 7, 1 << 62}
		if bad.tok == 7 {
			toks = []fence.Token{7} // below: stale; above: admitted over the bad run
		}
		for _, tok := range toks {
			for name, w := range map[string]guardtestWriter{"marks": ms, "in-row": rs} {
				err := w.WriteClaim(ctx, r, fence.Claim{Token: tok, Run: "run-a"}, "new")
				var me *fence.ForeignError
				if !errors.As(err, &me) || me.Resource != r || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrBusy) {
					t.Errorf("%s: mark (%d, %q), token %d: %v, want *fence.ForeignError", name, bad.tok, bad.run, tok, err)
				}
			}
		}
		if _, _, found, _ := ms.Read(ctx, r); found {
			t.Errorf("mark (%d, %q): marks mode wrote data", bad.tok, bad.run)
		}
		if v, _, _, _ := rs.Read(ctx, r); v != "old" {
			t.Errorf("mark (%d, %q): in-row value %q, want old", bad.tok, bad.run, v)
		}
		if _, err := g.Mark(ctx, r); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("Mark over (%d, %q): %v", bad.tok, bad.run, err)
		}
		if bad.tok == 7 {
			for name, w := range map[string]guardtestWriter{"marks": ms, "in-row": rs} {
				if err := w.WriteClaim(ctx, r, fence.Claim{Token: 8, Run: "run-a"}, "eight"); err != nil {
					t.Errorf("%s: token 8 over (7, %q): %v, want admitted", name, bad.run, err)
				}
			}
		}
	}
}

type guardtestWriter interface {
	WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error
}

// TestBadArguments: bad input is refused with typed errors before any
// I/O.
func TestBadArguments(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := f.guard(t, Config{DB: f.db})
	rows := f.inRow(t, RowsConfig{})
	if err := g.InTx(fence.WithClaim(ctx, fence.Claim{Token: 1}), "r", nil); !errors.Is(err, fence.ErrNilArgument) {
		t.Errorf("InTxClaim(nil fn): %v", err)
	}
	if err := g.InTx(fence.WithToken(ctx, 1), "r", nil); !errors.Is(err, fence.ErrNilArgument) {
		t.Errorf("InTx(nil fn): %v", err)
	}
	if err := g.FenceTx(fence.WithClaim(ctx, fence.Claim{Token: 1}), nil, "r"); !errors.Is(err, fence.ErrNilArgument) {
		t.Errorf("FenceTx(nil tx): %v", err)
	}
	if err := g.Fence(ctx, "r", 1, nil); !errors.Is(err, fence.ErrNilArgument) {
		t.Errorf("Fence(nil write): %v", err)
	}
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 1}), nil, []any{"a"}, "v"); !errors.Is(err, fence.ErrNilArgument) {
		t.Errorf("UpsertClaim(nil querier): %v", err)
	}
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 1}), f.db, []any{"a", "b"}, "v"); !errors.Is(err, ErrKeyArity) {
		t.Errorf("two key values: %v", err)
	}
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 1}), f.db, []any{"a"}); !errors.Is(err, ErrKeyArity) {
		t.Errorf("no column value: %v", err)
	}
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 1}), f.db, []any{"a\nb"}, "v"); !errors.Is(err, fence.ErrInvalidResource) {
		t.Errorf("key with a newline: %v", err)
	}
	if err := rows.Upsert(ctx, f.db, []any{"a"}, "v"); !errors.Is(err, fence.ErrNoToken) {
		t.Errorf("Upsert without a claim: %v", err)
	}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "DB"}, {Config{Table: "t"}, "DB"},
		{Config{DB: f.db, Table: "Bad"}, "Table"}, {Config{DB: f.db, Table: "a;b"}, "Table"}, {Config{DB: f.db, Table: "x`y"}, "Table"},
		{Config{DB: f.db, IsoLevel: sql.LevelSnapshot}, "IsoLevel"}, {Config{DB: f.db, SettleTimeout: -1}, "SettleTimeout"},
	} {
		_, err := New(tc.cfg)
		var ce *fence.ConfigError
		if !errors.Is(err, fence.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("New(%+v): %v, want a *fence.ConfigError for %s", tc.cfg, err, tc.field)
		}
	}
	for _, tc := range []struct {
		cfg   RowsConfig
		field string
	}{
		{RowsConfig{Table: "t"}, "Key"}, {RowsConfig{Key: []string{"k"}}, "Table"}, {RowsConfig{Table: "t", Key: []string{"k", "k"}}, "Key"},
		{RowsConfig{Table: "t", Key: []string{"k"}, Columns: []string{"v; DROP"}}, "Columns"},
		{RowsConfig{Table: "t", Key: []string{"k"}, RunColumn: "R"}, "RunColumn"},
	} {
		_, err := NewRows(tc.cfg)
		var ce *fence.ConfigError
		if !errors.Is(err, fence.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("NewRows(%+v): %v, want a *fence.ConfigError for %s", tc.cfg, err, tc.field)
		}
	}
	var n int
	if err := f.db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM "+f.marks+") + (SELECT COUNT(*) FROM "+f.rows+")").Scan(&n); err != nil || n != 0 {
		t.Errorf("rows written by refused calls: %d (%v)", n, err)
	}
}

// TestMetricsAndReuseLog: decisions of both modes are recorded with
// guard="mysql"; reuse refusals are logged at Error.
func TestMetricsAndReuseLog(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	m := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	g := f.guard(t, Config{DB: f.db, MeterProvider: m.Provider, Logger: logger})
	rows := f.inRow(t, RowsConfig{MeterProvider: m.Provider, Logger: logger})
	for _, w := range []guardtestWriter{marksSubject{f: f, g: g, db: f.db}, rowsSubject{f: f, r: rows, db: f.db}} {
		for _, c := range []fence.Claim{{Token: 5, Run: "run-a"}, {Token: 5, Run: "run-a"}, {Token: 3}, {Token: 5, Run: "run-b"}} {
			_ = w.WriteClaim(ctx, "metrics", c, "v")
		}
	}
	pts := m.Collect()
	attr := map[string]string{"guard": "mysql"}
	for name, want := range map[string]float64{"fencekit.guard.accepted": 4, "fencekit.guard.stale": 2, "fencekit.guard.reused": 2} {
		if got := obstest.Value(pts, name, attr); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	recs := logs.AtLeast(slog.LevelError)
	if len(recs) != 2 || recs[0].Message != "mysqlguard: "+"token reused by a different run; write refused" || recs[0].Attrs["mark_run"] != "run-a" {
		t.Errorf("reuse logs: %+v", recs)
	}
}
