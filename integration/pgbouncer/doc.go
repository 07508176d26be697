// Package pgbouncer tests fencekit behind PgBouncer (the Debian package,
// started privately per test by fencetest.PgBouncer, in front of the shared
// test database) in session and in transaction pooling: every statement of
// the lease Manager (internal/leasecheck) in the exec modes a pooler
// allows, the delivery check of the Manager's listener (which must report,
// not hide, that transaction pooling loses notifications, and poll instead),
// a direct LISTEN connection through lease.Config.ListenConnString, and the
// PostgreSQL guard's conformance kit through pgx and database/sql.
//
// Not covered: PgBouncer's prepared-statement support (1.21 and later; the
// Debian 12 package is 1.18), TLS, and authentication other than trust.
package pgbouncer
