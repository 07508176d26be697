// Package pgguard fences writes to PostgreSQL tables with high-water marks
// kept in the same database as the guarded data, checked inside the
// caller's own transaction.
//
// The marks live in the table fencekit_guard_marks of Config.Schema, created
// by migrations.Migrate(ctx, db, migrations.Options{Schema: ...}, migrations.Guard). It may be a
// different database from the one holding the leases: it must be the one
// holding the data the guard protects, so that the mark and the data share
// one transaction.
//
// Two ways to use it:
//
//   - Guard.FenceTx(ctx, tx, resource, token) inside a transaction you
//     opened, before (or after) your writes in that transaction, then
//     commit. One SQL statement, one round trip:
//
//     INSERT INTO fencekit_guard_marks AS m (resource, highest_token) VALUES ($1, $2)
//     ON CONFLICT (resource) DO UPDATE
//     SET highest_token = GREATEST(m.highest_token, EXCLUDED.highest_token),
//     updated_at = CASE WHEN m.highest_token <= EXCLUDED.highest_token
//     THEN clock_timestamp() ELSE m.updated_at END
//     RETURNING m.highest_token
//
//     The returned mark equals the token when it was admitted and is the
//     higher, exact current mark when it was refused.
//
//   - Guard.BeginFenced(ctx, db, resource, token) begins the transaction
//     and fences it in one round trip (BEGIN, SET LOCAL lock_timeout via
//     set_config and the fence statement sent as one pgx.Batch with
//     Batch.BeginTx), and hands you the transaction to write in and commit.
//     A guarded write transaction then costs the round trips of an
//     unguarded one (BEGIN+fence, your statements, COMMIT); what remains is
//     the server-side execution of the one-row upsert.
//
//   - Guard.Fence(ctx, resource, token, write), the fence.Guard
//     implementation: it begins a transaction on Config.DB and fences it
//     (through BeginFenced's single round trip when Config.DB implements
//     Batcher, as *pgxpool.Pool and *pgx.Conn do; otherwise BeginTx, then
//     FenceTx), runs write with the transaction in its ctx (TxFromContext),
//     commits, and rolls back on any error or panic.
//
// # What is guaranteed
//
//   - Decision rule of package fence (higher and equal accepted, lower
//     refused with *fence.StaleError naming the mark), applied atomically
//     with the caller's writes: they and the raised mark commit or roll back
//     together. A refused FenceTx rolls tx back, so writes made earlier in tx
//     cannot be committed by mistake afterwards.
//   - Concurrent holders of one resource serialise on the mark's row lock,
//     held from FenceTx until their transaction ends; the waiter then decides
//     on the committed outcome (a rolled-back raise does not count).
//   - FenceTx is one statement on every path, and a refusal carries the
//     exact current mark even when a transaction this statement waited for
//     committed it after the statement's snapshot (ON CONFLICT DO UPDATE
//     works on the latest committed row version). A refused call rewrites
//     the mark with its own value and rolls back, so it leaves no change.
//   - Lock timeout (55P03), serialization failure (40001) and deadlock
//     (40P01) are reported as errors matching fence.ErrBusy that also wrap the
//     *pgconn.PgError: nothing was written, retry the whole transaction. So
//     does ctx ending before the mark was decided (the error also matches
//     ctx.Err()); a ctx ending during COMMIT is not mapped, as its outcome
//     is unknown.
//   - Guard.Fence and Guard.BeginFenced bound their lock waits by
//     Config.LockTimeout (local to the transaction, sent with BEGIN in one
//     round trip) and by ctx. BeginFenced has FenceTx's errors and
//     decision; on any error it returns no transaction (rolled back, the
//     connection released).
//   - The schema name is validated with migrations.ValidateIdentifier; resource
//     and token are bound parameters. Invalid input is refused before any
//     I/O.
//
// # Isolation levels
//
// READ COMMITTED is the default and needs no retries beyond ErrBusy from
// lock timeouts and deadlocks. Under REPEATABLE READ and SERIALIZABLE the
// transaction's snapshot is taken by its first statement; if the mark's row
// was changed (or created) by a transaction that committed after that
// snapshot, PostgreSQL refuses the upsert with 40001 and FenceTx returns
// ErrBusy, even for a higher token. Retry the transaction. Fencing as the
// first statement of the transaction makes this rare. SERIALIZABLE can
// also fail at COMMIT; Guard.Fence maps that to ErrBusy too.
//
// # What is not guaranteed
//
//   - Only writes made through the same transaction are fenced. Writes on
//     other connections, in savepoint ("nested") pgx transactions that are
//     rolled back separately, or to other systems are not.
//   - If a COMMIT's reply is lost, its outcome is unknown: Fence returns the
//     connection error. Read the mark or the data before retrying with a
//     new token.
//   - FenceTx itself does not bound waits: set lock_timeout in your
//     transaction or give ctx a deadline (pgx cancels the query when ctx
//     ends).
//   - Tokens of different lease keys are not comparable; use one token
//     source per resource name.
//   - Marks are never deleted by this package. A resource row is small; if
//     you delete marks yourself, a stale writer with a token older than the
//     deleted mark will be accepted again.
package pgguard
