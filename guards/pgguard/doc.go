// Package pgguard fences writes to PostgreSQL tables: a write commits only
// if its claim (a fencing token and, optionally, the run identity it was
// granted to) is admitted by the resource's high-water mark, checked by one
// statement in the write's own transaction.
//
// The marks live in the table fencekit_guard_marks of Config.Schema,
// created by migrations.Migrate(ctx, db, migrations.Options{Schema: ...},
// migrations.Guard) in the database that holds the guarded data, so the
// mark and the data share one transaction.
//
// # Databases and entry points
//
// A Guard owns its database: Config.DB (pgx: a *pgxpool.Pool or *pgx.Conn)
// and/or Config.SQLDB (database/sql: a *sql.DB or *sql.Conn), one of them
// required. The methods that open a transaction take no database argument;
// the ones that fence the caller's own transaction take that transaction.
// A method that needs the database the Config does not set returns a
// *fence.ConfigError (fence.ErrInvalidConfig) before any I/O.
//
// Every entry point takes the claim from ctx (fence.ClaimFromContext: a
// lease's context carries its claim; fence.WithClaim or fence.WithToken
// set one for a token from elsewhere):
//
//   - InTx (pgx, on Config.DB) and InSQLTx
//     (database/sql, on Config.SQLDB): begin, fence, run the function,
//     commit; roll back on any error or panic. InTx sends BEGIN and the
//     fence statement in one round trip.
//   - Begin (pgx, on Config.DB): begin and fence in one round
//     trip, and hand over the transaction to write in and commit.
//   - FenceTx (pgx) and FenceSQLTx
//     (database/sql): fence inside a transaction the caller opened (for
//     example through an ORM).
//   - Fence: the fence.Guard method, for code written against that
//     interface (its callback's ctx carries the transaction and the
//     admitted claim); Mark reads a mark (a fence.Claim). Both use Config.DB, or
//     Config.SQLDB when DB is nil.
//
// In-row mode (Rows, built by NewRows) keeps the token and run identity in
// columns of the user's own rows instead of the marks table: Upsert
// (pgx) and UpsertSQL (database/sql) write one
// row with one conditional upsert that changes no row when the claim is
// refused, then read the row's token to name it in the error. Their
// querier argument says where the statement runs: a pool or connection
// (the statement is its own transaction) or the caller's transaction. The mark is
// the row: deleting the row deletes the mark, after which a stale writer can
// insert the row again. Mark deletions with a fenced write instead (a
// tombstone column), or use the marks table for such resources.
//
// # What is guaranteed
//
//   - The decision rule of package fence, with run identities
//     (fence.DecideClaim): a lower token is refused with *fence.StaleError
//     naming the exact current mark; an equal token whose run identity
//     differs from the one stored with the mark (both non-empty) is refused
//     with *fence.ReusedError, counted and logged at Error; anything else is
//     admitted and stored as fence.NextMark says. The decision and the raise
//     are one statement, atomic with the caller's writes: they commit or
//     roll back together. In-row mode applies the same rule to the row's
//     own columns, in the write itself.
//   - After any refusal or database error the transaction has been rolled
//     back, so writes made earlier in it cannot be committed.
//   - Concurrent holders of one resource serialise on the mark's row lock
//     until the first transaction ends; the waiter decides on the committed
//     outcome.
//   - Lock timeout (55P03), serialization failure (40001) and deadlock
//     (40P01) match fence.ErrBusy: nothing was written, retry the
//     transaction. Once ctx has ended every error matches ctx.Err() and
//     context.Cause(ctx) and none matches fence.ErrBusy.
//   - A COMMIT the Guard sends (InTx, InSQLTx, Fence), and an in-row write
//     outside a transaction (its own transaction), that fails after it was
//     sent without an answer from the server (ctx ended while waiting, the
//     connection broke) returns a *fence.OutcomeUnknownError
//     (fence.ErrOutcomeUnknown; also ctx.Err() and context.Cause(ctx) when
//     ctx ended): it may have committed. "Nothing written" (an error
//     matching only the context's, or fence.ErrBusy) is reported only when
//     the COMMIT was not sent or the server answered with an error. Read
//     the data or the mark back, or retry with the same claim (an equal
//     token is admitted).
//   - With Config.Strict (RowsConfig.Strict) a write whose resource lies
//     outside its claim's scope, or whose claim has no scope, is refused
//     with a *fence.ScopeError (fence.ErrOutOfScope) before any I/O.
//   - Transactions the Guard opens bound their lock waits by
//     Config.LockTimeout (set by the fence statement itself) and by ctx.
//   - Bad input (resource, token, run identity, scope, missing claim, nil
//     arguments: fence.ErrNilArgument, nil ctx included) is refused with a
//     typed error before any I/O. The schema
//     name is validated; values are bound parameters.
//
// # What is not guaranteed
//
//   - Only writes made in the fenced transaction are fenced; writes on
//     other connections or in a savepoint rolled back on its own are not.
//   - FenceTx and FenceSQLTx leave the caller's transaction settings alone:
//     their lock waits are bounded only by ctx and the caller's own
//     lock_timeout.
//   - Under REPEATABLE READ and SERIALIZABLE, a mark changed after the
//     transaction's snapshot fails the fence with fence.ErrBusy even for a
//     higher token; retry the transaction.
//   - The Guard does not settle an unknown outcome itself. Begin, FenceTx
//     and FenceSQLTx leave the COMMIT to the caller, whose driver error
//     says nothing about the outcome either: treat a COMMIT error without
//     a server answer the same way.
//   - Tokens of different lease keys are not comparable. Marks are never
//     deleted by this package; deleting one re-admits older tokens.
package pgguard
