package mysqlguard

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/fence"
)

// TestLockWaitTimeoutIsBusy: a transaction that waits for a mark's row
// lock beyond innodb_lock_wait_timeout (1205) fails with fence.ErrBusy,
// writes nothing, and a retry after the holder ends succeeds.
func TestLockWaitTimeoutIsBusy(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	holder := openDB(t, nil)
	waiter := openDB(t, func(c *mysql.Config) {
		c.Params = map[string]string{"innodb_lock_wait_timeout": "1"}
	})
	g := f.guard(t, Config{DB: waiter})
	const r = "busy/lockwait"
	tx, err := holder.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rollback(tx)
	if err := g.FenceTx(fence.WithClaim(ctx, fence.Claim{Token: 5}), tx, r); err != nil {
		t.Fatal(err)
	}
	s := marksSubject{f: f, g: g, db: waiter}
	err = s.Write(ctx, r, 6, "six")
	var me *mysql.MySQLError
	if !errors.Is(err, fence.ErrBusy) || !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("write waiting on a held mark: %v, want fence.ErrBusy from 1205", err)
	}
	rollback(tx)
	if _, _, found, _ := s.Read(ctx, r); found {
		t.Fatal("busy write stored a row")
	}
	if err := s.Write(ctx, r, 6, "six"); err != nil {
		t.Fatalf("retry after the holder ended: %v", err)
	}
}

// TestDeadlockIsBusy: two transactions fencing two resources in opposite
// orders deadlock; InnoDB rolls one back (1213) and it fails with
// fence.ErrBusy, the other commits.
func TestDeadlockIsBusy(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := f.guard(t, Config{DB: f.db}) // FenceTx only: the transactions are on dbs
	dbs := []*sql.DB{openDB(t, nil), openDB(t, nil)}
	watch := openDB(t, nil)
	res := []string{"deadlock/a", "deadlock/b"}
	txs := make([]*sql.Tx, 2)
	for i := range 2 {
		tx, err := dbs[i].BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rollback(tx)
		if err := g.FenceTx(fence.WithClaim(ctx, fence.Claim{Token: 3}), tx, res[i]); err != nil {
			t.Fatal(err)
		}
		txs[i] = tx
	}
	errs := make(chan error, 2)
	go func() { errs <- g.FenceTx(fence.WithClaim(ctx, fence.Claim{Token: 3}), txs[0], res[1]) }()
	// Wait until the first transaction waits for the second's lock, then
	// close the cycle.
	waitFor(t, "a lock wait", func() bool {
		select {
		case err := <-errs:
			t.Fatalf("the first cross fence returned without waiting: %v", err)
		default:
		}
		var n int
		// The only statement on the marks table now is the waiting one.
		_ = watch.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ?",
			"INSERT INTO `"+f.marks+"`%").Scan(&n)
		return n > 0
	})
	go func() { errs <- g.FenceTx(fence.WithClaim(ctx, fence.Claim{Token: 3}), txs[1], res[0]) }()
	var busy, ok int
	for range 2 {
		err := <-errs
		var me *mysql.MySQLError
		switch {
		case err == nil:
			ok++
		case errors.Is(err, fence.ErrBusy) && errors.As(err, &me) && me.Number == 1213:
			busy++
		default:
			t.Errorf("unexpected: %v", err)
		}
	}
	if busy != 1 || ok != 1 {
		t.Fatalf("%d busy, %d fenced, want one of each", busy, ok)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
