package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/mysqlguard"
)

// mysqlCase: in-row mode (Rows.Upsert vs the same upsert unguarded,
// autocommit) and marks mode (InTx + upsert vs BEGIN + upsert +
// COMMIT), one connection with interpolateParams (one round trip per
// statement), all sides interleaved. A fifth side runs the cheapest
// conditional upsert that refuses an older token and reports the decision
// in its reply (each assignment under a bare token comparison, no run
// identity, no check of the stored mark): the floor of the in-row form.
func mysqlCase(e *bench.Env) error {
	ctx := e.Ctx
	cfg, err := mysql.ParseDSN(bench.Getenv("TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test"))
	if err != nil {
		return err
	}
	cfg.InterpolateParams = true
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	suffix := fmt.Sprint(time.Now().UnixNano())
	docs, data := "fk_bench_docs_"+suffix, "fk_bench_data_"+suffix
	g, err := mysqlguard.New(mysqlguard.Config{DB: db, Table: "fk_bench_marks_" + suffix, IsoLevel: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := g.CreateTable(ctx); err != nil {
		return err
	}
	for _, q := range []string{
		"CREATE TABLE " + docs + " (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(255) NOT NULL, fence_token BIGINT NOT NULL, fence_run VARBINARY(64) NOT NULL DEFAULT '') ENGINE=InnoDB",
		"CREATE TABLE " + data + " (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(255) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	defer func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+docs+", "+data+", "+g.Table()) }()
	rows, err := mysqlguard.NewRows(mysqlguard.RowsConfig{Table: docs, Key: []string{"resource"}, Columns: []string{"value"}, RunColumn: "fence_run"})
	if err != nil {
		return err
	}
	upsertRow := "INSERT INTO " + docs + " (resource, value, fence_token, fence_run) VALUES (?, ?, ?, ?) " +
		"ON DUPLICATE KEY UPDATE value = VALUES(value), fence_token = VALUES(fence_token), fence_run = VALUES(fence_run)"
	floorRow := "INSERT INTO " + docs + " (resource, value, fence_token, fence_run) VALUES (?, ?, ?, ?) " +
		"ON DUPLICATE KEY UPDATE value = IF(fence_token < VALUES(fence_token), VALUES(value), value), " +
		"fence_run = IF(fence_token < VALUES(fence_token), VALUES(fence_run), fence_run), " +
		"fence_token = IF(LAST_INSERT_ID(IF(fence_token < VALUES(fence_token), 0, -fence_token)) = 0, VALUES(fence_token), fence_token)"
	upsertData := "INSERT INTO " + data + " (resource, value, token) VALUES (?, ?, ?) " +
		"ON DUPLICATE KEY UPDATE value = VALUES(value), token = VALUES(token)"
	run := bench.RunIdentity()
	var tok fence.Token
	claim := func() fence.Claim { tok++; return fence.Claim{Token: tok, Run: run} }
	const (
		plainUpsert = iota
		rowsUpsert
		plainTx
		inTx
		floorUpsert
	)
	ops := []bench.Op{
		plainUpsert: {Name: "plain upsert", Run: func(int) error {
			c := claim()
			_, err := db.ExecContext(ctx, upsertRow, "plain", "value", int64(c.Token), c.Run)
			return err
		}},
		rowsUpsert: {Name: "Rows.Upsert", Run: func(int) error {
			return rows.Upsert(fence.WithClaim(ctx, claim()), db, []any{"rows"}, "value")
		}},
		plainTx: {Name: "plain tx", Run: func(int) error {
			c := claim()
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, upsertData, "plain", "value", int64(c.Token)); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
		inTx: {Name: "InTx", Run: func(int) error {
			c := claim()
			return g.InTx(fence.WithClaim(ctx, c), "intx", func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, upsertData, "intx", "value", int64(c.Token))
				return err
			})
		}},
		floorUpsert: {Name: "conditional upsert floor", Run: func(int) error {
			c := claim()
			_, err := db.ExecContext(ctx, floorRow, "floor", "value", int64(c.Token), c.Run)
			return err
		}},
	}
	in, err := bench.Interleave(ops, rounds(e, 4*time.Millisecond), time.Time{})
	if err != nil {
		return err
	}
	e.Report.Add(bench.GuardRatio(in, "mysql_guard_rows_ratio", rowsUpsert, plainUpsert, 1.05, fmt.Sprintf(
		"in-row mode: Rows.Upsert vs the same upsert unguarded (autocommit), go-sql-driver with interpolateParams, one connection; %d rounds of 5 sides interleaved, median of %d blocks",
		in.Rounds(), bench.RatioBlocks)))
	e.Report.Add(bench.GuardRatio(in, "mysql_conditional_floor_ratio", floorUpsert, plainUpsert, 0,
		"the same upsert with each assignment under a bare token comparison and the decision in LAST_INSERT_ID (no run identity, no mark check) vs unguarded: the floor of the in-row form"))
	e.Report.Add(bench.GuardRatio(in, "mysql_guard_intx_ratio", inTx, plainTx, 0,
		"marks mode: InTx (BEGIN, fence statement, upsert, COMMIT) vs BEGIN + upsert + COMMIT, READ COMMITTED"))
	e.Report.Add(bench.Metric{Key: "mysql_upsert_us", Value: float64(in.PerOp(plainUpsert)) / 1e3, Unit: "µs", Note: "unguarded upsert, autocommit"})
	e.Report.Add(bench.Metric{Key: "mysql_write_tx_us", Value: float64(in.PerOp(plainTx)) / 1e3, Unit: "µs", Note: "unguarded BEGIN + upsert + COMMIT"})
	return nil
}
