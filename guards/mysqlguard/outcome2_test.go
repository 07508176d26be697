package mysqlguard

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/netproxy"
)

// TestInTxCommitBoundedByContext: with the DSN's default (no readTimeout),
// COMMIT reaches the server and its reply is held. InTx under a 1 s ctx
// returns soon after ctx ends (COMMIT's wait ends with ctx), and the
// settling read, on a fresh connection that is not held, finds the write
// committed: nil. The same for in-row mode's own transaction, which does
// not settle: fence.ErrOutcomeUnknown.
func TestInTxCommitBoundedByContext(t *testing.T) {
	f := newFixture(t)
	for _, mode := range []string{"marks", "inrow"} {
		t.Run(mode, func(t *testing.T) {
			db, p := firstConnDB(t)
			hold := func() { p.Pause(netproxy.Downstream) }
			var write func(ctx context.Context) error
			if mode == "marks" {
				g := f.guard(t, Config{DB: db, SettleTimeout: 2 * time.Second})
				g.beforeCommit = hold
				write = func(ctx context.Context) error {
					return (marksSubject{f: f, g: g, db: db}).Write(ctx, "bounded/commit", 3, "three")
				}
			} else {
				rows := f.inRow(t, RowsConfig{})
				rows.beforeCommit = hold
				write = func(ctx context.Context) error {
					return rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 3}), db, []any{"bounded/commit"}, "three")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- write(ctx) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(6 * time.Second):
				p.Restore() // let the write return before the test ends
				<-done
				t.Fatalf("write with a held COMMIT reply still running %v after its 1 s ctx", time.Since(start))
			}
			el := time.Since(start)
			p.Restore()
			if el > 3*time.Second {
				t.Errorf("returned after %v, want about 1 s (ctx) plus the settling read", el)
			}
			if mode == "marks" && err != nil {
				t.Errorf("held COMMIT reply, settled on a fresh connection: %v, want nil (committed)", err)
			}
			if mode == "inrow" && !errors.Is(err, fence.ErrOutcomeUnknown) {
				t.Errorf("held COMMIT reply: %v, want fence.ErrOutcomeUnknown", err)
			}
			t.Logf("%s: returned after %v: %v", mode, el.Round(time.Millisecond), err)
		})
	}
}

// TestLockWaitBeyondReadTimeoutIsBusy: the driver's readTimeout (1 s) is
// below the server's lock wait timeout (50 s): a fence statement waiting
// for a held row lock loses its reply ("invalid connection"). Nothing can
// commit (the connection is closed), so the error matches fence.ErrBusy and
// names the guard and the resource; a retry after the holder ends succeeds.
func TestLockWaitBeyondReadTimeoutIsBusy(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	holder := openDB(t, nil)
	waiter := openDB(t, func(c *mysql.Config) {
		c.ReadTimeout = time.Second
		c.Params = map[string]string{"innodb_lock_wait_timeout": "50"}
	})
	const r = "busy/readtimeout"
	g := f.guard(t, Config{DB: waiter})
	rows := f.inRow(t, RowsConfig{})
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 1}), holder, []any{r}, "one"); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rollback(tx)
	if err := g.FenceTx(fence.WithClaim(ctx, fence.Claim{Token: 5}), tx, r); err != nil {
		t.Fatal(err)
	}
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 5}), tx, []any{r}, "five"); err != nil {
		t.Fatal(err)
	}
	for name, write := range map[string]func() error{
		"InTx":   func() error { return (marksSubject{f: f, g: g, db: waiter}).Write(ctx, r, 6, "six") },
		"Upsert": func() error { return rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 6}), waiter, []any{r}, "six") },
	} {
		err := write()
		if !errors.Is(err, fence.ErrBusy) || !strings.Contains(err.Error(), "mysqlguard") || !strings.Contains(err.Error(), r) {
			t.Errorf("%s waiting on a held row lock beyond readTimeout: %v, want fence.ErrBusy naming mysqlguard and %q", name, err, r)
		}
	}
	rollback(tx)
	if err := (marksSubject{f: f, g: g, db: waiter}).Write(ctx, r, 6, "six"); err != nil {
		t.Errorf("InTx retry after the holder ended: %v", err)
	}
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 6}), waiter, []any{r}, "six"); err != nil {
		t.Errorf("Upsert retry after the holder ended: %v", err)
	}
}

// TestInTxFunctionErrorNamesGuard: an error of InTx's function comes back
// with the guard's prefix and the resource, still matching the function's
// error; nothing is committed.
func TestInTxFunctionErrorNamesGuard(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := f.guard(t, Config{DB: f.db})
	mine := errors.New("my function failed")
	err := g.InTx(fence.WithClaim(ctx, fence.Claim{Token: 2}), "fn/err", func(context.Context, *sql.Tx) error { return mine })
	if !errors.Is(err, mine) || !strings.HasPrefix(err.Error(), "mysqlguard: ") || !strings.Contains(err.Error(), `"fn/err"`) {
		t.Fatalf("function error: %v, want it wrapped with mysqlguard's prefix and the resource", err)
	}
	if m, err := g.Mark(ctx, "fn/err"); err != nil || m.Token != 0 {
		t.Fatalf("mark after a failed function: %+v %v, want none (the zero Claim)", m, err)
	}
}

// TestNilContext: every entry point refuses a nil ctx with fence.ErrNilArgument
// instead of panicking.
func TestNilContext(t *testing.T) {
	f := newFixture(t)
	g := f.guard(t, Config{DB: f.db})
	rows := f.inRow(t, RowsConfig{})
	fn := func(context.Context, *sql.Tx) error { return nil }
	var nilCtx context.Context
	for name, call := range map[string]func() error{
		"InTx":        func() error { return g.InTx(nilCtx, "r", fn) },
		"FenceTx":     func() error { return g.FenceTx(nilCtx, nil, "r") },
		"Fence":       func() error { return g.Fence(nilCtx, "r", 1, func(context.Context) error { return nil }) },
		"Mark":        func() error { _, err := g.Mark(nilCtx, "r"); return err },
		"CreateTable": func() error { return g.CreateTable(nilCtx) },
		"Upsert":      func() error { return rows.Upsert(nilCtx, f.db, []any{"r"}, "v") },
	} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = errors.New("panic")
				}
			}()
			return call()
		}()
		if !errors.Is(err, fence.ErrNilArgument) {
			t.Errorf("%s(nil ctx): %v, want fence.ErrNilArgument", name, err)
		}
	}
}

// TestInRowKeyBytesAndNullToken: a []byte key is validated as its bytes (a
// NUL byte is refused with fence.ErrInvalidResource before any I/O, where
// its fmt.Sprint text "[97 0]" would pass), and a NULL token in a nullable
// token column refuses the write with *fence.ForeignError, writing nothing.
func TestInRowKeyBytesAndNullToken(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	rows := f.inRow(t, RowsConfig{})
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 1}), f.db, []any{[]byte("a\x00")}, "v"); !errors.Is(err, fence.ErrInvalidResource) {
		t.Errorf("[]byte key with a NUL byte: %v, want fence.ErrInvalidResource", err)
	}
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 1}), f.db, []any{[]byte("bytes/key")}, "v"); err != nil {
		t.Errorf("[]byte key: %v", err)
	} else if v, _, _, _ := (rowsSubject{f: f, r: rows, db: f.db}).Read(ctx, "bytes/key"); v != "v" {
		t.Errorf("[]byte key stored %q", v)
	}
	table := randomName("fk_rows_null_")
	if _, err := f.db.ExecContext(ctx, "CREATE TABLE "+table+" (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(255) NOT NULL, "+
		"fence_token BIGINT NULL, fence_run VARBINARY(64) NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = f.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table) })
	nr, err := NewRows(RowsConfig{Table: table, Key: []string{"resource"}, Columns: []string{"value"}, RunColumn: "fence_run"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ExecContext(ctx, "INSERT INTO "+table+" VALUES ('null/tok', 'old', NULL, NULL), ('null/run', 'old', 4, NULL)"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r   string
		tok fence.Token
	}{{"null/tok", 1}, {"null/tok", 9}, {"null/run", 4}} {
		err := nr.Upsert(fence.WithClaim(ctx, fence.Claim{Token: tc.tok, Run: "run-a"}), f.db, []any{tc.r}, "new")
		var me *fence.ForeignError
		if !errors.As(err, &me) || me.Resource != tc.r {
			t.Errorf("%s, token %d: %v, want *fence.ForeignError", tc.r, tc.tok, err)
		}
		var v string
		if err := f.db.QueryRowContext(ctx, "SELECT value FROM "+table+" WHERE resource = ?", tc.r).Scan(&v); err != nil || v != "old" {
			t.Errorf("%s: value %q %v, want old", tc.r, v, err)
		}
	}
	if err := nr.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "run-a"}), f.db, []any{"null/run"}, "five"); err != nil {
		t.Errorf("higher token over a NULL run: %v, want admitted", err)
	}
}

// TestMarkNotFound: Mark of a resource never written is the zero Claim,
// as in every guard; of a written one, returns its claim.
func TestMarkNotFound(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := f.guard(t, Config{DB: f.db})
	if m, err := g.Mark(ctx, "mark/none"); err != nil || m != (fence.Claim{}) {
		t.Fatalf("Mark of a resource never written: %+v %v, want the zero Claim", m, err)
	}
	if err := (marksSubject{f: f, g: g, db: f.db}).WriteClaim(ctx, "mark/some", fence.Claim{Token: 4, Run: "run-a"}, "v"); err != nil {
		t.Fatal(err)
	}
	if m, err := g.Mark(ctx, "mark/some"); err != nil || m != (fence.Claim{Token: 4, Run: "run-a"}) {
		t.Fatalf("Mark of a written resource: %+v %v", m, err)
	}
}

// TestCheckTable: CheckTable refuses a missing table and one without a
// column the guard uses with *TableError (ErrTableMismatch), and accepts
// the right one; a write to a missing table matches ErrTableMismatch too.
func TestCheckTable(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	missing := randomName("fk_missing_")
	g := f.guard(t, Config{DB: f.db})
	if err := g.CheckTable(ctx); err != nil {
		t.Fatalf("CheckTable of the created marks table: %v", err)
	}
	gm, err := New(Config{DB: f.db, Table: missing})
	if err != nil {
		t.Fatal(err)
	}
	var te *TableError
	if err := gm.CheckTable(ctx); !errors.As(err, &te) || te.Table != missing || !errors.Is(err, ErrTableMismatch) {
		t.Errorf("CheckTable of a missing marks table: %v, want *TableError", err)
	}
	if err := (marksSubject{f: f, g: gm, db: f.db}).Write(ctx, "check/r", 1, "v"); !errors.Is(err, ErrTableMismatch) {
		t.Errorf("write to a missing marks table: %v, want ErrTableMismatch", err)
	}
	if err := gm.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = f.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+missing) })
	if err := gm.CheckTable(ctx); err != nil {
		t.Errorf("CheckTable after CreateTable: %v", err)
	}
	narrow := randomName("fk_narrow_")
	if _, err := f.db.ExecContext(ctx, "CREATE TABLE "+narrow+" (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(255) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = f.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+narrow) })
	gn, err := New(Config{DB: f.db, Table: narrow})
	if err != nil {
		t.Fatal(err)
	}
	if err := gn.CheckTable(ctx); !errors.Is(err, ErrTableMismatch) {
		t.Errorf("CheckTable of a marks table without run and write_id: %v, want ErrTableMismatch", err)
	}
	if err := f.inRow(t, RowsConfig{}).CheckTable(ctx, f.db); err != nil {
		t.Errorf("Rows.CheckTable of the right table: %v", err)
	}
	for name, cfg := range map[string]RowsConfig{
		"missing table":  {Table: missing + "_x", Key: []string{"resource"}, Columns: []string{"value"}},
		"missing column": {Table: narrow, Key: []string{"resource"}, Columns: []string{"value"}, RunColumn: "fence_run"},
	} {
		r, err := NewRows(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CheckTable(ctx, f.db); !errors.Is(err, ErrTableMismatch) {
			t.Errorf("Rows.CheckTable, %s: %v, want ErrTableMismatch", name, err)
		}
	}
}
