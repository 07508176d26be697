// Package migrationtools proves that fencekit's schema can be applied and
// removed with goose (github.com/pressly/goose/v3) and golang-migrate
// (github.com/golang-migrate/migrate/v4, pgx/v5 driver, iofs source), using
// the files sql/migrations.ToolFS serves: each tool applies both sets to an
// empty private schema (each set with its own version table), the lease and
// the PostgreSQL guard then work on the result, migrations.Validate accepts
// it, and migrating all the way down leaves no fencekit object behind.
//
// It is a nested module so that the main module does not depend on either
// tool. It has tests only.
package migrationtools
