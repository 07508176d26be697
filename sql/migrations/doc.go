// Package migrations holds fencekit's database schema as plain, numbered SQL
// migrations and a small runner for them.
//
// Two migration sets exist: [Lease] (the lease table and the token sequence)
// and [Guard] (the high-water-mark table of the PostgreSQL guard). They are
// separate because a guard's marks may live in another database than the
// leases, next to the data they protect.
//
// The files under lease/ and guard/ are ordinary SQL named NNNN_name.up.sql and
// NNNN_name.down.sql, with unqualified object names, so goose or
// golang-migrate users can apply them with their own tools. [Migrate] applies
// them itself: in one transaction per call, under a transaction-scoped
// advisory lock, with search_path set to the chosen schema, recording applied
// versions in fencekit_schema_migrations.
//
// Guaranteed: Migrate is idempotent, and safe when several processes run it at
// once (they serialise on the advisory lock; all but the first find nothing
// to do). Schema names are validated as plain lower-case identifiers; nothing
// is ever interpolated into SQL unvalidated.
//
// Not guaranteed: down migrations are provided for completeness and for
// tests; running them destroys leases and marks, and with them the ordering
// guarantees that rely on kept rows.
package migrations
