package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrInvalidVersion is matched by the error for a target version that is
// not a version number (negative). Nothing changed.
var ErrInvalidVersion = errors.New("migrations: invalid target version")

// ErrUnknownVersion is matched by *UnknownVersionError.
var ErrUnknownVersion = errors.New("migrations: schema has versions this build does not embed")

// UnknownVersionError reports versions recorded in the schema that this
// build does not embed (a newer build applied them): Down refuses to
// revert past them, since it does not have their down scripts. Nothing
// changed. It matches ErrUnknownVersion.
type UnknownVersionError struct {
	Schema   string
	Set      Set
	Versions []int // ascending
}

// Error implements error.
func (e *UnknownVersionError) Error() string {
	vs := make([]string, len(e.Versions))
	for i, v := range e.Versions {
		vs[i] = fmt.Sprintf("%04d", v)
	}
	return fmt.Sprintf("migrations: schema %q has %s set versions %s that this build does not embed: revert them with the build that applied them",
		e.Schema, e.Set, strings.Join(vs, ", "))
}

// Is reports whether target is ErrUnknownVersion.
func (e *UnknownVersionError) Is(target error) bool { return target == ErrUnknownVersion }

// Down reverts the migrations of set recorded in the schema above version
// to, newest first, and returns the versions it reverted (descending);
// to = 0 reverts the whole set. It runs, for each version, the down script
// that the goose and golang-migrate files (ToolFS) carry: the removal of
// the version's row in fencekit_schema_migrations (at version 1 also the
// version table itself once no set has a row left) and the version's
// .down.sql body. Everything happens in one transaction under the same
// advisory lock as Migrate, with search_path set to the schema: either all
// the versions are reverted or none is.
//
// A schema without the version table has nothing to revert. A negative to
// is refused with ErrInvalidVersion, and versions recorded above to that
// this build does not embed with an *UnknownVersionError; in both cases
// nothing changed.
//
// Reverting destroys data: version 1 of the lease set drops every lease
// and the token sequence, and later versions drop columns running
// processes use (see the package documentation).
func Down(ctx context.Context, db Execer, opts Options, set Set, to int) ([]int, error) {
	if db == nil {
		return nil, errors.New("migrations: nil database handle")
	}
	schema, err := opts.schema()
	if err != nil {
		return nil, err
	}
	if to < 0 {
		return nil, fmt.Errorf("%w: %d (want 0 or a version of the %s set)", ErrInvalidVersion, to, set)
	}
	ms, err := Migrations(set)
	if err != nil {
		return nil, err
	}
	known := make(map[int]Migration, len(ms))
	for _, m := range ms {
		known[m.Version] = m
	}
	qs := `"` + schema + `"`
	var reverted []int
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		exists, err := versionTableExists(ctx, tx, schema)
		if err != nil || !exists {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT version FROM `+qs+`.fencekit_schema_migrations WHERE set_name = $1::text AND version > $2::integer ORDER BY version DESC`,
			string(set), to)
		if err != nil {
			return err
		}
		recorded, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		var unknown []int
		for _, v := range recorded {
			if _, ok := known[v]; !ok {
				unknown = append(unknown, v)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			return &UnknownVersionError{Schema: schema, Set: set, Versions: unknown}
		}
		if len(recorded) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", qs); err != nil {
			return err
		}
		for _, v := range recorded {
			m := known[v]
			if _, err := tx.Exec(ctx, downScript(m)); err != nil {
				return fmt.Errorf("migrations: %s down migration %04d_%s: %w", set, m.Version, m.Name, err)
			}
			reverted = append(reverted, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reverted, nil
}

// versionTableExists reports whether schema has fencekit_schema_migrations.
func versionTableExists(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, schema string) (bool, error) {
	var exists bool
	err := q.QueryRow(ctx, "SELECT to_regclass(format('%I.fencekit_schema_migrations', $1::text)) IS NOT NULL", schema).Scan(&exists)
	return exists, err
}
