// Package hostile holds fencekit's hostile-input and security tests, run
// against the real PostgreSQL and MinIO: a table of bad inputs through the
// public API of every package (each must give a typed error, write nothing,
// not panic and leak no goroutine), SQL-injection strings through every
// configurable identifier and through every bound value, and the
// least-privilege PostgreSQL role that the lease and PostgreSQL-guard
// operations must work under.
//
// The package has no non-test code besides the exported helpers below; its
// value is in its tests. docs/testing.md describes them and the role.
package hostile
