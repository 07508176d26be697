package migrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AppliedVersion is one version recorded in fencekit_schema_migrations.
type AppliedVersion struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// SetStatus is the state of one migration set in a schema.
type SetStatus struct {
	Set Set
	// Applied lists the versions the schema records, ascending, whichever
	// of Migrate, goose or golang-migrate applied them.
	Applied []AppliedVersion
	// Pending lists the versions this build embeds that the schema has not
	// recorded, ascending: what Migrate would apply.
	Pending []int
	// Unknown lists recorded versions this build does not embed (a newer
	// build applied them), ascending.
	Unknown []int
}

// Current is the highest applied version, 0 when none is.
func (s SetStatus) Current() int {
	if len(s.Applied) == 0 {
		return 0
	}
	return s.Applied[len(s.Applied)-1].Version
}

// Status reads, for each of the given sets (default: both), the versions
// the schema records and those this build would apply. It only reads: a
// missing schema or version table means nothing is applied. Sets are
// returned in the order given.
func Status(ctx context.Context, db Execer, opts Options, sets ...Set) ([]SetStatus, error) {
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
	embedded := map[Set][]Migration{}
	for _, s := range sets {
		ms, err := Migrations(s)
		if err != nil {
			return nil, err
		}
		embedded[s] = ms
	}
	recorded := map[Set][]AppliedVersion{}
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		exists, err := versionTableExists(ctx, tx, schema)
		if err != nil || !exists {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT set_name, version, name, applied_at FROM "`+schema+`".fencekit_schema_migrations ORDER BY set_name, version`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				s string
				a AppliedVersion
			)
			if err := rows.Scan(&s, &a.Version, &a.Name, &a.AppliedAt); err != nil {
				return err
			}
			recorded[Set(s)] = append(recorded[Set(s)], a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: status of schema %q: %w", schema, err)
	}
	out := make([]SetStatus, 0, len(sets))
	for _, s := range sets {
		st := SetStatus{Set: s, Applied: recorded[s]}
		have := map[int]bool{}
		for _, a := range st.Applied {
			have[a.Version] = true
		}
		known := map[int]bool{}
		for _, m := range embedded[s] {
			known[m.Version] = true
			if !have[m.Version] {
				st.Pending = append(st.Pending, m.Version)
			}
		}
		for _, a := range st.Applied {
			if !known[a.Version] {
				st.Unknown = append(st.Unknown, a.Version)
			}
		}
		out = append(out, st)
	}
	return out, nil
}
