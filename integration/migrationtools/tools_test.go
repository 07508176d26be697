package migrationtools

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var sets = []migrations.Set{migrations.Lease, migrations.Guard}

// emptySchema creates a private schema, dropped at cleanup.
func emptySchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	schema := fencetest.RandomName("fk_tools_")
	if _, err := pool.Exec(context.Background(), `CREATE SCHEMA "`+schema+`"`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = migrations.DropSchema(context.Background(), pool, schema) })
	return schema
}

// objects lists the relations, functions and types in schema.
func objects(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT 'rel ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		UNION ALL SELECT 'func ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		UNION ALL SELECT 'type ' || ty.typname FROM pg_type ty JOIN pg_namespace n ON n.oid = ty.typnamespace
			WHERE n.nspname = $1 AND ty.typtype NOT IN ('c', 'b') -- row types of tables, arrays
		ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// proveSchema runs the lease and the PostgreSQL guard on schema: acquire,
// renew, release, re-acquire with a larger token; a fenced write accepted,
// a stale one refused.
func proveSchema(t *testing.T, schema string) {
	t.Helper()
	ctx := context.Background()
	pool := fencetest.Pool(t)
	if err := migrations.Validate(ctx, pool, migrations.Options{Schema: schema}); err != nil {
		t.Fatalf("Validate after the tool's up: %v", err)
	}
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	key := lease.Key{AccountID: "acct", SessionID: "s1"}
	l1, err := m.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire on the tool's schema: %v", err)
	}
	if _, err := l1.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	// A second Manager (own pool) cannot take the held key.
	other, err := lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: schema, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	if _, err := other.Acquire(ctx, key); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("second Acquire of a held key: %v, want ErrHeld", err)
	}
	if _, err := l1.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l2, err := other.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("re-Acquire: %v", err)
	}
	defer func() { _, _ = l2.Release(ctx) }()
	if l2.Token() <= l1.Token() {
		t.Fatalf("re-acquired token %d not above %d", l2.Token(), l1.Token())
	}

	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	res := key.Resource("report")
	if _, err := pool.Exec(ctx, `CREATE TABLE "`+schema+`".reports (id text PRIMARY KEY, body text)`); err != nil {
		t.Fatal(err)
	}
	write := func(ctx context.Context, body string) error {
		return g.InTx(ctx, res, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO "`+schema+`".reports VALUES ('r', $1) ON CONFLICT (id) DO UPDATE SET body = excluded.body`, body)
			return err
		})
	}
	if err := write(l2.Context(), "by l2"); err != nil {
		t.Fatalf("fenced write under the current lease: %v", err)
	}
	stale := fence.WithClaim(ctx, fence.Claim{Token: l1.Token(), Run: l1.RunID().String()})
	if err := write(stale, "by l1"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("fenced write under the old token: %v, want ErrStale", err)
	}
	var body string
	if err := pool.QueryRow(ctx, `SELECT body FROM "`+schema+`".reports`).Scan(&body); err != nil || body != "by l2" {
		t.Fatalf("row: %q %v", body, err)
	}
	if _, err := pool.Exec(ctx, `DROP TABLE "`+schema+`".reports`); err != nil {
		t.Fatal(err)
	}
}

func sqlDB(t *testing.T, schema string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(fencetest.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func gooseProvider(t *testing.T, db *sql.DB, set migrations.Set) *goose.Provider {
	t.Helper()
	fsys, err := migrations.ToolFS(migrations.Goose, set)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName("fencekit_"+string(set)+"_goose_version"), // one version table per set
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGoose(t *testing.T) {
	ctx := context.Background()
	pool := fencetest.Pool(t)
	schema := emptySchema(t, pool)
	db := sqlDB(t, schema)
	providers := map[migrations.Set]*goose.Provider{}
	for _, set := range sets {
		providers[set] = gooseProvider(t, db, set)
	}
	// Partly up: lease 1..2 only. Validate names the rest.
	if _, err := providers[migrations.Lease].UpTo(ctx, 2); err != nil {
		t.Fatalf("goose up to 2: %v", err)
	}
	checkMissing(t, pool, schema, map[migrations.Set]int{migrations.Lease: 2, migrations.Guard: 0})
	for _, set := range sets {
		res, err := providers[set].Up(ctx)
		if err != nil {
			t.Fatalf("goose up %s: %v", set, err)
		}
		t.Logf("goose up %s: %d migrations", set, len(res))
	}
	proveSchema(t, schema)
	for _, set := range []migrations.Set{migrations.Guard, migrations.Lease} {
		if _, err := providers[set].DownTo(ctx, 0); err != nil {
			t.Fatalf("goose down %s: %v", set, err)
		}
	}
	expectOnly(t, pool, schema, "fencekit_lease_goose_version", "fencekit_guard_goose_version")
	checkMissing(t, pool, schema, map[migrations.Set]int{migrations.Lease: 0, migrations.Guard: 0})
}

func migrateInstance(t *testing.T, schema string, set migrations.Set) *migrate.Migrate {
	t.Helper()
	fsys, err := migrations.ToolFS(migrations.GolangMigrate, set)
	if err != nil {
		t.Fatal(err)
	}
	src, err := iofs.New(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	db := sqlDB(t, schema)
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{
		MigrationsTable: "fencekit_" + string(set) + "_migrate_version", // one version table per set
		SchemaName:      schema,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = m.Close() })
	return m
}

func TestGolangMigrate(t *testing.T) {
	pool := fencetest.Pool(t)
	schema := emptySchema(t, pool)
	ms := map[migrations.Set]*migrate.Migrate{}
	for _, set := range sets {
		ms[set] = migrateInstance(t, schema, set)
	}
	if err := ms[migrations.Lease].Steps(2); err != nil {
		t.Fatalf("migrate 2 steps: %v", err)
	}
	checkMissing(t, pool, schema, map[migrations.Set]int{migrations.Lease: 2, migrations.Guard: 0})
	for _, set := range sets {
		if err := ms[set].Up(); err != nil {
			t.Fatalf("migrate up %s: %v", set, err)
		}
		v, dirty, err := ms[set].Version()
		t.Logf("golang-migrate %s at version %d (dirty %v, %v)", set, v, dirty, err)
	}
	proveSchema(t, schema)
	for _, set := range []migrations.Set{migrations.Guard, migrations.Lease} {
		if err := ms[set].Down(); err != nil {
			t.Fatalf("migrate down %s: %v", set, err)
		}
	}
	expectOnly(t, pool, schema, "fencekit_lease_migrate_version", "fencekit_guard_migrate_version")
	checkMissing(t, pool, schema, map[migrations.Set]int{migrations.Lease: 0, migrations.Guard: 0})
}

// checkMissing requires Validate to report exactly the versions after
// applied[set] as missing.
func checkMissing(t *testing.T, pool *pgxpool.Pool, schema string, applied map[migrations.Set]int) {
	t.Helper()
	err := migrations.Validate(context.Background(), pool, migrations.Options{Schema: schema})
	var ne *migrations.NotMigratedError
	if !errors.As(err, &ne) {
		t.Fatalf("Validate: %v, want *NotMigratedError", err)
	}
	for set, n := range applied {
		all, err := migrations.Migrations(set)
		if err != nil {
			t.Fatal(err)
		}
		var want []int
		for _, m := range all[n:] {
			want = append(want, m.Version)
		}
		if !slices.Equal(ne.Missing[set], want) {
			t.Errorf("Validate: %s missing %v, want %v (%v)", set, ne.Missing[set], want, err)
		}
	}
}

// expectOnly requires schema to hold nothing but the tools' own version
// tables (and their sequences).
func expectOnly(t *testing.T, pool *pgxpool.Pool, schema string, toolTables ...string) {
	t.Helper()
	var left []string
	for _, o := range objects(t, pool, schema) {
		ok := false
		for _, tt := range toolTables {
			for _, allowed := range []string{"rel " + tt, "rel " + tt + "_pkey", "rel " + tt + "_id_seq"} {
				ok = ok || o == allowed
			}
		}
		if !ok {
			left = append(left, o)
		}
	}
	if len(left) > 0 {
		t.Fatalf("after migrating all the way down, schema %s still holds %v", schema, left)
	}
	t.Logf("after down: %v", fmt.Sprint(objects(t, pool, schema)))
}
