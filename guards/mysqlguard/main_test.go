package mysqlguard

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// defaultDSN is used when TEST_MYSQL_DSN is unset.
const defaultDSN = "root@tcp(127.0.0.1:3306)/test"

// missing fails the test under CI (CI=true or 1) and skips it otherwise.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (start it with `make services` and export TEST_MYSQL_DSN)"
	if v := strings.ToLower(os.Getenv("CI")); v == "true" || v == "1" {
		t.Fatalf("required service missing under CI: %s", msg)
	}
	t.Skip(msg)
}

func dsnConfig(t testing.TB) *mysql.Config {
	t.Helper()
	dsn := os.Getenv("TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = defaultDSN
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("bad TEST_MYSQL_DSN: %v", err)
	}
	return cfg
}

// openDB opens a new, independent pool (closed when the test ends);
// adjust changes the driver config first (address, timeouts, session
// variables).
func openDB(t testing.TB, adjust func(*mysql.Config)) *sql.DB {
	t.Helper()
	cfg := dsnConfig(t)
	if adjust != nil {
		adjust(cfg)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		missing(t, "MySQL/MariaDB at TEST_MYSQL_DSN unreachable: %v", err)
	}
	return db
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// fixture is a private marks table and data table, dropped when the test
// ends.
type fixture struct {
	db                *sql.DB
	marks, data, rows string
}

func newFixture(t testing.TB) fixture {
	t.Helper()
	db := openDB(t, nil)
	f := fixture{db: db, marks: randomName("fk_marks_"), data: randomName("fk_data_"), rows: randomName("fk_rows_")}
	ctx := context.Background()
	g := f.guard(t, Config{DB: db})
	if err := g.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE " + f.data + " (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(255) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE " + f.rows + " (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(255) NOT NULL, " +
			"fence_token BIGINT NOT NULL, fence_run VARBINARY(64) NOT NULL DEFAULT '') ENGINE=InnoDB",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+f.marks+", "+f.data+", "+f.rows)
	})
	return f
}

func (f fixture) guard(t testing.TB, cfg Config) *Guard {
	t.Helper()
	cfg.Table = f.marks
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (f fixture) inRow(t testing.TB, cfg RowsConfig) *Rows {
	t.Helper()
	cfg.Table, cfg.Key, cfg.Columns, cfg.RunColumn = f.rows, []string{"resource"}, []string{"value"}, "fence_run"
	r, err := NewRows(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// writeData is the guarded write of marks mode: the data row, in tx.
func (f fixture) writeData(ctx context.Context, tx *sql.Tx, r string, tok int64, v string) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+f.data+" (resource, value, token) VALUES (?, ?, ?) "+
		"ON DUPLICATE KEY UPDATE value = VALUES(value), token = VALUES(token)", r, v, tok)
	return err
}

func (f fixture) readData(ctx context.Context, db *sql.DB, table, tokCol, r string) (string, int64, bool, error) {
	var (
		v   string
		tok int64
	)
	err := db.QueryRowContext(ctx, "SELECT value, "+tokCol+" FROM "+table+" WHERE resource = ?", r).Scan(&v, &tok)
	if err == sql.ErrNoRows {
		return "", 0, false, nil
	}
	return v, tok, err == nil, err
}
