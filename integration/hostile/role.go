package hostile

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/sql/migrations"
)

// Grants returns the statements that give role exactly the privileges
// fencekit needs in schema, and nothing more:
//
//   - USAGE on the schema (no CREATE: no DDL),
//   - SELECT, INSERT, UPDATE on fencekit_leases and fencekit_guard_marks
//     (no DELETE, no TRUNCATE: leases are kept on release, marks are
//     raised, never removed), and on fencekit_managers and
//     fencekit_displaced (the heartbeat, takeover and revoke),
//   - USAGE, SELECT on fencekit_token_seq (nextval and reading the current
//     value; no UPDATE, so no setval).
//
// extraTables are application tables the role also writes (SELECT, INSERT,
// UPDATE). Every name is validated with migrations.ValidateIdentifier.
func Grants(schema, role string, extraTables ...string) ([]string, error) {
	qs, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return nil, err
	}
	qr, err := migrations.QuoteIdentifier(role)
	if err != nil {
		return nil, err
	}
	stmts := []string{
		fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", qs, qr),
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s.fencekit_leases, %s.fencekit_guard_marks TO %s", qs, qs, qr),
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s.fencekit_managers, %s.fencekit_displaced TO %s", qs, qs, qr),
		fmt.Sprintf("GRANT USAGE, SELECT ON SEQUENCE %s.fencekit_token_seq TO %s", qs, qr),
	}
	for _, t := range extraTables {
		qt, err := migrations.QuoteIdentifier(t)
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s.%s TO %s", qs, qt, qr))
	}
	return stmts, nil
}

// CreateRole creates a LOGIN role with no other attributes (NOSUPERUSER,
// NOCREATEDB, NOCREATEROLE, NOINHERIT, NOBYPASSRLS) and applies Grants.
// admin must be allowed to create roles.
func CreateRole(ctx context.Context, admin *pgxpool.Pool, schema, role string, extraTables ...string) error {
	qr, err := migrations.QuoteIdentifier(role)
	if err != nil {
		return err
	}
	stmts, err := Grants(schema, role, extraTables...)
	if err != nil {
		return err
	}
	stmts = append([]string{
		"CREATE ROLE " + qr + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOBYPASSRLS NOREPLICATION",
	}, stmts...)
	for _, s := range stmts {
		if _, err := admin.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// DropRole removes role and every privilege granted to it.
func DropRole(ctx context.Context, admin *pgxpool.Pool, role string) error {
	qr, err := migrations.QuoteIdentifier(role)
	if err != nil {
		return err
	}
	for _, s := range []string{"DROP OWNED BY " + qr, "DROP ROLE IF EXISTS " + qr} {
		if _, err := admin.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}
