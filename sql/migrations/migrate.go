package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed lease guard effects mcp
var files embed.FS

// Set names a group of migrations that is versioned on its own.
type Set string

const (
	// Lease is the lease table and the token sequence.
	Lease Set = "lease"
	// Guard is the PostgreSQL guard's high-water-mark table.
	Guard Set = "guard"
	// Effects is the outbox table of package effects (effects recorded
	// under a lease, delivered by relays). It must live in the database of
	// the Lease set, as it is written in the transaction that checks the
	// producer's lease row. Migrate applies it only when asked for.
	Effects Set = "effects"
	// MCP is the table of package mcpfence that keeps the results of
	// tools/call requests named by a request id (duplicate calls get the
	// first call's result). It must live in the database of the Lease set,
	// as a request is claimed in the transaction that checks the call's
	// lease row. Migrate applies it only when asked for.
	MCP Set = "mcp"
)

// DefaultSchema is the schema Migrate and the packages using it default to.
const DefaultSchema = "public"

// ErrInvalidIdentifier is matched by errors about a configurable SQL
// identifier (such as a schema name) that fails validation.
var ErrInvalidIdentifier = errors.New("migrations: invalid identifier")

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidateIdentifier accepts plain lower-case PostgreSQL identifiers:
// a letter or underscore, then letters, digits or underscores, at most 63
// bytes, and not starting with "pg_" (reserved for system schemas).
func ValidateIdentifier(name string) error {
	if !identRE.MatchString(name) || strings.HasPrefix(name, "pg_") {
		if len(name) > 64 {
			name = name[:64] + "…"
		}
		return fmt.Errorf("%w: %q (want [a-z_][a-z0-9_]{0,62}, not pg_*)", ErrInvalidIdentifier, name)
	}
	return nil
}

// QuoteIdentifier validates name and returns it double-quoted for use in SQL.
func QuoteIdentifier(name string) (string, error) {
	if err := ValidateIdentifier(name); err != nil {
		return "", err
	}
	return `"` + name + `"`, nil
}

// Migration is one numbered step of a Set.
type Migration struct {
	Set     Set
	Version int
	Name    string
	Up      string
	Down    string
}

// Migrations returns the migrations of set in version order.
func Migrations(set Set) ([]Migration, error) {
	dir := string(set)
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: unknown migration set %q", set)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		var dirn string
		switch {
		case strings.HasSuffix(name, ".up.sql"):
			dirn = "up"
		case strings.HasSuffix(name, ".down.sql"):
			dirn = "down"
		default:
			continue
		}
		num, rest, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migrations: bad migration file name %q", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migrations: bad migration file name %q", name)
		}
		body, err := fs.ReadFile(files, dir+"/"+name)
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Set: set, Version: v, Name: strings.TrimSuffix(strings.TrimSuffix(rest, ".up.sql"), ".down.sql")}
			byVersion[v] = m
		}
		if dirn == "up" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// FS returns the embedded migration files (directory "<set>", e.g. "lease"),
// for use with external migration tools.
func FS() fs.FS { return files }

// Execer is satisfied by *pgx.Conn, *pgxpool.Pool and *pgxpool.Conn.
type Execer interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Options configures Migrate.
type Options struct {
	// Schema to create the objects in; DefaultSchema when empty. It is
	// created if missing. Must pass ValidateIdentifier.
	Schema string
}

func (o Options) schema() (string, error) {
	s := o.Schema
	if s == "" {
		s = DefaultSchema
	}
	return s, ValidateIdentifier(s)
}

// advisory lock key: an arbitrary constant shared by every fencekit process.
const migrateLockKey int64 = 0x66656e63656b6974 // "fencekit"

// Migrate applies every pending up migration of the given sets in one
// transaction. It is idempotent and safe to run from several processes at
// once. With no sets it applies both, Lease and Guard. It returns the
// versions it applied, per set.
func Migrate(ctx context.Context, db Execer, opts Options, sets ...Set) (map[Set][]int, error) {
	if db == nil {
		return nil, errors.New("migrations: nil database handle")
	}
	schema, err := opts.schema()
	if err != nil {
		return nil, err
	}
	if len(sets) == 0 {
		sets = []Set{Lease, Guard}
	}
	plans := map[Set][]Migration{}
	for _, s := range sets {
		ms, err := Migrations(s)
		if err != nil {
			return nil, err
		}
		plans[s] = ms
	}
	qs := `"` + schema + `"`
	applied := map[Set][]int{}
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+qs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", qs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
			set_name   text        NOT NULL,
			version    integer     NOT NULL,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
			PRIMARY KEY (set_name, version))`); err != nil {
			return err
		}
		for _, s := range sets {
			var current int
			if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM fencekit_schema_migrations WHERE set_name = $1", string(s)).Scan(&current); err != nil {
				return err
			}
			for _, m := range plans[s] {
				if m.Version <= current {
					continue
				}
				if _, err := tx.Exec(ctx, m.Up); err != nil {
					return fmt.Errorf("migrations: %s migration %04d_%s: %w", s, m.Version, m.Name, err)
				}
				if _, err := tx.Exec(ctx, "INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ($1, $2, $3)", string(s), m.Version, m.Name); err != nil {
					return err
				}
				applied[s] = append(applied[s], m.Version)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// DropSchema drops schema and everything in it. It refuses DefaultSchema.
// Tests use it to remove their private schema.
func DropSchema(ctx context.Context, db Execer, schema string) error {
	if err := ValidateIdentifier(schema); err != nil {
		return err
	}
	if schema == DefaultSchema {
		return fmt.Errorf("migrations: refusing to drop schema %q", schema)
	}
	return inTx(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
		return err
	})
}

func inTx(ctx context.Context, db Execer, fn func(pgx.Tx) error) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// NotMigrated returns a *NotMigratedError wrapping err when err is the
// database's refusal of a statement because an object it names does not
// exist — a table (SQLSTATE 42P01), a column (42703) or a function (42883):
// the sign that the schema was not migrated, or not to this build's version.
// Any other error (nil included) is returned unchanged.
func NotMigrated(schema string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42P01", "42703", "42883":
			return &NotMigratedError{Schema: schema, Err: err}
		}
	}
	return err
}

// IsUndefinedTable reports whether err is PostgreSQL's "relation does not
// exist" (SQLSTATE 42P01), the usual sign that Migrate was not run.
func IsUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
