package mysqlguard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// triggerTable creates an in-row table with an updated_at column, an
// audit table, and the triggers given (see userTriggers); both are dropped
// when the test ends. It returns the table's and the audit table's names.
func triggerTable(t *testing.T, f fixture, triggers ...string) (string, string) {
	t.Helper()
	ctx := context.Background()
	table, audit := randomName("fk_trg_"), randomName("fk_audit_")
	for _, q := range []string{
		"CREATE TABLE " + table + " (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(255) NOT NULL, " +
			"fence_token BIGINT NOT NULL, fence_run VARBINARY(64) NOT NULL DEFAULT '', " +
			"updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
		"CREATE TABLE " + audit + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, resource VARBINARY(512) NOT NULL, " +
			"old_token BIGINT NULL, new_token BIGINT NOT NULL, value VARCHAR(255) NOT NULL) ENGINE=InnoDB",
	} {
		if _, err := f.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = f.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table+", "+audit) })
	for i, trg := range triggers {
		q := fmt.Sprintf("CREATE TRIGGER %s_%d ", table, i) + fmt.Sprintf(trg, table, audit)
		if _, err := f.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return table, audit
}

// Trigger bodies of every kind a user's schema may carry: %[1]s is the
// table, %[2]s the audit table.
var userTriggers = map[string][]string{
	"before update set new.col": {"BEFORE UPDATE ON %[1]s FOR EACH ROW SET NEW.updated_at = CURRENT_TIMESTAMP(6)"},
	"after update audit insert": {"AFTER UPDATE ON %[1]s FOR EACH ROW INSERT INTO %[2]s (resource, old_token, new_token, value) VALUES (NEW.resource, OLD.fence_token, NEW.fence_token, NEW.value)"},
	"before update set @var":    {"BEFORE UPDATE ON %[1]s FOR EACH ROW SET @fk_trigger_seen = NEW.fence_token"},
	"before insert set new.col": {"BEFORE INSERT ON %[1]s FOR EACH ROW SET NEW.updated_at = CURRENT_TIMESTAMP(6)"},
	"after insert audit insert": {"AFTER INSERT ON %[1]s FOR EACH ROW INSERT INTO %[2]s (resource, old_token, new_token, value) VALUES (NEW.resource, NULL, NEW.fence_token, NEW.value)"},
	"all of them": {
		"BEFORE UPDATE ON %[1]s FOR EACH ROW BEGIN SET NEW.updated_at = CURRENT_TIMESTAMP(6); SET @fk_trigger_seen = NEW.fence_token; END",
		"AFTER UPDATE ON %[1]s FOR EACH ROW INSERT INTO %[2]s (resource, old_token, new_token, value) VALUES (NEW.resource, OLD.fence_token, NEW.fence_token, NEW.value)",
		"BEFORE INSERT ON %[1]s FOR EACH ROW SET NEW.updated_at = CURRENT_TIMESTAMP(6)",
		"AFTER INSERT ON %[1]s FOR EACH ROW INSERT INTO %[2]s (resource, old_token, new_token, value) VALUES (NEW.resource, NULL, NEW.fence_token, NEW.value)",
	},
}

func triggerRows(t *testing.T, table string) *Rows {
	t.Helper()
	r, err := NewRows(RowsConfig{Table: table, Key: []string{"resource"}, Columns: []string{"value"}, RunColumn: "fence_run"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestInRowUserTriggers: the user's table carries triggers (BEFORE/AFTER,
// UPDATE/INSERT, SET NEW.col, SET @var, an audit insert). Over a row at
// (5, run-a), a stale write (3), a re-used token (5, run-b) and a stale
// write inside a *sql.Tx are refused with the typed errors and change
// nothing; a higher token is admitted and stored.
func TestInRowUserTriggers(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for name, trgs := range userTriggers {
		t.Run(name, func(t *testing.T) {
			table, _ := triggerTable(t, f, trgs...)
			rows := triggerRows(t, table)
			const r = "trigger/row"
			read := func() (string, int64, string) {
				t.Helper()
				var (
					v, run string
					tok    int64
				)
				if err := f.db.QueryRowContext(ctx, "SELECT value, fence_token, fence_run FROM "+table+" WHERE resource = ?", r).Scan(&v, &tok, &run); err != nil {
					t.Fatal(err)
				}
				return v, tok, run
			}
			if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "run-a"}), f.db, []any{r}, "five"); err != nil {
				t.Fatalf("insert at (5, run-a): %v", err)
			}
			if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "run-a"}), f.db, []any{r}, "five again"); err != nil {
				t.Fatalf("the same claim again: %v", err)
			}
			if v, tok, run := read(); v != "five again" || tok != 5 || run != "run-a" {
				t.Fatalf("row (%q, %d, %q) after the same claim again", v, tok, run)
			}
			err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 3, Run: "run-a"}), f.db, []any{r}, "stale")
			if se, ok := fence.IsStale(err); !ok || se.Presented != 3 || se.Highest != 5 || se.Overtaken {
				t.Errorf("stale write (3 over 5): %v, want *fence.StaleError{3, 5}", err)
			}
			err = rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "run-b"}), f.db, []any{r}, "reused")
			if !errors.Is(err, fence.ErrTokenReused) {
				t.Errorf("re-used token (5, run-b over 5, run-a): %v, want fence.ErrTokenReused", err)
			}
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 4}), tx, []any{r}, "stale in tx")
			if se, ok := fence.IsStale(err); !ok || se.Highest != 5 {
				t.Errorf("stale write in a *sql.Tx: %v, want *fence.StaleError", err)
			}
			rollback(tx)
			if v, tok, run := read(); v != "five again" || tok != 5 || run != "run-a" {
				t.Fatalf("row (%q, %d, %q) after refused writes, want unchanged", v, tok, run)
			}
			if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 6, Run: "run-b"}), f.db, []any{r}, "six"); err != nil {
				t.Fatalf("higher token: %v", err)
			}
			if v, tok, run := read(); v != "six" || tok != 6 || run != "run-b" {
				t.Fatalf("row (%q, %d, %q) after token 6", v, tok, run)
			}
		})
	}
}

// TestInRowAuditedConcurrentWriters: 8 writers on independent pools write
// one row of an audited table (every trigger kind) with tokens 1..160 in
// shuffled order. The audit table records every row version the server
// stored, so it says which writes were applied: a write is applied if and
// only if its Upsert returned nil, a refused one is a *fence.StaleError
// naming a mark above its token, and the applied tokens rise in audit
// order.
func TestInRowAuditedConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	table, audit := triggerTable(t, f, userTriggers["all of them"]...)
	rows := triggerRows(t, table)
	const (
		writers = 8
		perW    = 20
		r       = "audited/row"
	)
	results := make([]error, writers*perW+1)
	var wg sync.WaitGroup
	for w := range writers {
		db := openDB(t, nil)
		wg.Go(func() {
			for i := range perW {
				tok := fence.Token(i*writers + w + 1) // writer w: w+1, w+1+8, ...
				results[tok] = rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: tok, Run: fmt.Sprintf("run-%d", tok)}), db, []any{r}, fmt.Sprintf("v%d", tok))
			}
		})
	}
	wg.Wait()
	applied := map[int64]bool{}
	q, err := f.db.QueryContext(ctx, "SELECT new_token, value FROM "+audit+" WHERE resource = ? ORDER BY id", r)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var last int64
	for q.Next() {
		var (
			tok int64
			v   string
		)
		if err := q.Scan(&tok, &v); err != nil {
			t.Fatal(err)
		}
		if tok < last {
			t.Errorf("audit: token %d stored after %d", tok, last)
		}
		last = tok
		if v == fmt.Sprintf("v%d", tok) {
			applied[tok] = true
		}
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	nApplied, nRefused := 0, 0
	for tok := int64(1); tok <= writers*perW; tok++ {
		err := results[tok]
		switch {
		case err == nil && !applied[tok]:
			t.Errorf("token %d: Upsert returned nil, but the write was not applied", tok)
		case err != nil && applied[tok]:
			t.Errorf("token %d: applied, but Upsert returned %v", tok, err)
		case err != nil:
			if se, ok := fence.IsStale(err); !ok || int64(se.Highest) <= tok {
				t.Errorf("token %d: %v, want *fence.StaleError naming a higher mark", tok, err)
			}
			nRefused++
		default:
			nApplied++
		}
	}
	t.Logf("%d applied, %d refused", nApplied, nRefused)
	var v string
	var tok int64
	if err := f.db.QueryRowContext(ctx, "SELECT value, fence_token FROM "+table+" WHERE resource = ?", r).Scan(&v, &tok); err != nil {
		t.Fatal(err)
	}
	if tok != last || v != fmt.Sprintf("v%d", tok) {
		t.Errorf("row (%q, %d), last audited token %d", v, tok, last)
	}
}
