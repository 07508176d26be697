package migrations

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrNotMigrated is matched by a *NotMigratedError.
var ErrNotMigrated = errors.New("migrations: schema is not at the expected version")

// NotMigratedError reports that a schema lacks fencekit's objects: per set,
// the versions this build expects that the schema has not recorded
// (Validate), or the database's own refusal of a statement that needs them
// (Err, from NotMigrated). The remedy is Migrate (or `fencekit migrate up`).
type NotMigratedError struct {
	Schema  string
	Missing map[Set][]int // set → missing versions, ascending
	Err     error         // the database error that showed it; nil from Validate
}

// Unwrap returns the database error, if any.
func (e *NotMigratedError) Unwrap() error { return e.Err }

// Error implements error.
func (e *NotMigratedError) Error() string {
	if len(e.Missing) == 0 {
		what := "schema"
		if e.Schema != "" {
			what = fmt.Sprintf("schema %q", e.Schema)
		}
		return fmt.Sprintf("migrations: %s is not migrated (apply migrations.Migrate, or run `fencekit migrate up`): %v", what, e.Err)
	}
	sets := make([]string, 0, len(e.Missing))
	for s := range e.Missing {
		sets = append(sets, string(s))
	}
	sort.Strings(sets)
	parts := make([]string, 0, len(sets))
	for _, s := range sets {
		vs := make([]string, 0, len(e.Missing[Set(s)]))
		for _, v := range e.Missing[Set(s)] {
			vs = append(vs, fmt.Sprintf("%04d", v))
		}
		parts = append(parts, fmt.Sprintf("%s set missing %s", s, strings.Join(vs, ", ")))
	}
	return fmt.Sprintf("migrations: schema %q is not migrated: %s", e.Schema, strings.Join(parts, "; "))
}

// Is reports whether target is ErrNotMigrated.
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// Validate checks, at startup, that the schema has every migration of the
// given sets (default: both) that this build embeds. It reads the version
// rows in fencekit_schema_migrations, which Migrate writes and which the
// goose and golang-migrate files (ToolFS) write too, so it works whichever
// of them applied the schema. A missing migration yields a
// *NotMigratedError naming the set and versions. Versions newer than this
// build knows are accepted (a newer build migrated first). It reads only.
func Validate(ctx context.Context, db Execer, opts Options, sets ...Set) error {
	if db == nil {
		return errors.New("migrations: nil database handle")
	}
	schema, err := opts.schema()
	if err != nil {
		return err
	}
	if len(sets) == 0 {
		sets = []Set{Lease, Guard}
	}
	want := map[Set][]Migration{}
	for _, s := range sets {
		ms, err := Migrations(s)
		if err != nil {
			return err
		}
		want[s] = ms
	}
	have := map[Set]map[int]bool{}
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass(format('%I.fencekit_schema_migrations', $1::text)) IS NOT NULL", schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT set_name, version FROM "`+schema+`".fencekit_schema_migrations`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			var v int
			if err := rows.Scan(&s, &v); err != nil {
				return err
			}
			if have[Set(s)] == nil {
				have[Set(s)] = map[int]bool{}
			}
			have[Set(s)][v] = true
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("migrations: validate schema %q: %w", schema, err)
	}
	missing := map[Set][]int{}
	for _, s := range sets {
		for _, m := range want[s] {
			if !have[s][m.Version] {
				missing[s] = append(missing[s], m.Version)
			}
		}
	}
	if len(missing) > 0 {
		return &NotMigratedError{Schema: schema, Missing: missing}
	}
	return nil
}
