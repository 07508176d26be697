package lease

import (
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/pgerr"
	"github.com/fencekit/fencekit/sql/migrations"
)

// ErrBusy is matched by the error of a statement the database aborted
// because of concurrency: serialization failure (SQLSTATE 40001, e.g. on a
// database whose default_transaction_isolation is serializable or repeatable
// read), deadlock (40P01) or lock timeout (55P03, a role's lock_timeout).
// The statement changed nothing (a refused acquire may have consumed a
// sequence value); retrying is the right answer. AcquireWait retries such
// attempts itself. It is fence.ErrBusy, the one "busy, retry" outcome of
// every fencekit package: a guard's busy refusal matches it too.
var ErrBusy = fence.ErrBusy

// classify wraps err with ErrBusy when the database aborted the statement
// for concurrency, and with a *migrations.NotMigratedError when the
// statement names an object the schema lacks (the PostgreSQL error names the
// schema-qualified object); other errors are returned as they are.
func classify(err error) error {
	if pgerr.Code(err) == "" {
		return err
	}
	if what, ok := pgerr.BusyReason(err); ok {
		return fmt.Errorf("lease: database busy (%s): %w: %w", what, ErrBusy, err)
	}
	return migrations.NotMigrated("", err)
}
