// Package mysqlguard fences writes to MySQL and MariaDB tables through
// database/sql (github.com/go-sql-driver/mysql): a write commits only if
// its claim (a fencing token and, optionally, the run identity it was
// granted to) is admitted by the resource's high-water mark, checked by one
// statement in the write's own transaction.
//
// # Modes
//
// Marks mode (Guard, built by New) keeps the marks in a table of their own
// (Config.Table, created by CreateTable from schema.sql), in the database
// that holds the guarded data, so the mark and the data share one
// transaction. A Guard owns its database, Config.DB (required; New returns
// a *fence.ConfigError without it): the methods that open a transaction take no
// database argument, the ones that fence the caller's own transaction take
// that transaction.
//
//   - InTx: begin on Config.DB (isolation Config.IsoLevel),
//     fence, run the function, commit; roll back on any error or panic.
//   - FenceTx: fence inside a transaction the caller opened
//     (for example through an ORM).
//   - Fence: the fence.Guard method, on Config.DB; the callback finds the
//     transaction with TxFromContext and the admitted claim with
//     fence.ClaimFromContext. Mark reads a mark on Config.DB (the
//     zero Claim for a resource never written), and
//     CreateTable creates the marks table there.
//
// In-row mode (Rows, built by NewRows) keeps the token and run identity in
// columns of the user's own rows: Upsert writes one row with
// one INSERT ... ON DUPLICATE KEY UPDATE that changes nothing when the
// claim is refused, followed in the same transaction by a locking read of
// the row's token and run that decides. Their querier argument says where
// the statements run: the caller's *sql.Tx, or a *sql.DB or *sql.Conn, on
// which Upsert opens a transaction of its own and commits an admitted
// write. The mark is the row: deleting the row deletes the mark.
//
// Every entry point takes the claim from ctx (fence.ClaimFromContext; a
// claim from elsewhere goes in with fence.WithClaim).
//
// # How the decision is made
//
// Marks mode: the fence statement is an upsert whose update part assigns
// every column through the decision (fence.DecideClaim over the stored
// token and run). Its token assignment also sets LAST_INSERT_ID: 0 when
// admitted, minus the stored token when refused, math.MinInt64 when the
// stored mark is not one the guard writes. The OK reply carries that value,
// so an admitted or stale write needs no second statement; only a refusal
// at the mark's own token (a reuse) reads the mark's run. The marks table
// is the guard's own: a trigger on it would change that reply, and is not
// supported. The assignments read only columns assigned after them, so
// they mean the same under left-to-right assignment (MySQL, MariaDB) and
// under MariaDB's SIMULTANEOUS_ASSIGNMENT.
//
// In-row mode decides from the row itself, never from the statement's
// reply, which the user's triggers change (any UPDATE trigger, a SET @var
// or an audit insert in one, resets the insert id). The upsert takes the
// row's exclusive lock (inserted, updated or left as it was) until the
// transaction ends; the locking read that follows it in the same
// transaction (SELECT ... FOR UPDATE reads the latest version under READ
// COMMITTED, REPEATABLE READ and SERIALIZABLE alike, not the transaction's
// snapshot) therefore returns the row exactly as the upsert left it. An
// admitted claim left fence.NextMark of the old mark and the claim, which
// fence.DecideClaim admits again; a refused one left the old mark, which
// refuses it again. So the decision over the row read back is the decision
// the upsert made. An admitted write costs the upsert and the read in the
// caller's *sql.Tx; on a *sql.DB or *sql.Conn also START TRANSACTION and
// COMMIT (four round trips). Triggers may change other columns and write
// other tables; they must not change the token or run columns.
//
// A transaction is also what keeps a delayed copy of a request from
// landing after a later write of the same claim: only COMMIT makes the
// upsert durable, COMMIT is sent after the row is locked, and a later
// write of the row waits for that lock until the held transaction ends
// (committed when its COMMIT arrives, rolled back when its connection
// goes). go-sql-driver/mysql itself re-sends nothing whose bytes left:
// it returns driver.ErrBadConn (which database/sql retries on another
// connection) only when nothing was written.
//
// # Contexts and COMMIT
//
// database/sql's Tx.Commit takes no context. When ctx can end, the guard
// sends COMMIT as a statement under ctx instead (the driver closes the
// connection when ctx ends, so the wait ends with it) and then ends
// database/sql's transaction with a ROLLBACK, which changes nothing after
// a COMMIT: one more round trip. A COMMIT of InTx or Fence whose wait
// ended is then settled (below) within Config.SettleTimeout, so InTx
// returns at most SettleTimeout after ctx ends, with the driver's default
// DSN (no readTimeout) too. A nil ctx is refused with fence.ErrNilArgument.
//
// # What is guaranteed
//
//   - The decision rule of package fence with run identities: a lower token
//     is refused with *fence.StaleError naming the mark; an equal token
//     whose run differs from the mark's (both non-empty) with
//     *fence.ReusedError, counted and logged at Error; anything else is
//     admitted and stored as fence.NextMark says, atomically with the
//     caller's writes.
//   - After any refusal or database error, a transaction the guard fenced
//     has been rolled back.
//   - Concurrent holders of one resource serialise on the mark's row lock
//     until the first transaction ends, under READ COMMITTED and
//     REPEATABLE READ alike (the upsert reads the latest committed row).
//   - Deadlock (1213) and lock wait timeout (1205) match fence.ErrBusy:
//     nothing was committed; retry the transaction. So does a statement
//     before COMMIT (the fence statement, the in-row upsert or read) whose
//     reply the driver gave up on ("invalid connection": a row-lock wait
//     longer than the DSN's readTimeout, or the network): the driver closed
//     the connection, so its transaction cannot commit. Once ctx has ended,
//     every error matches ctx.Err() and context.Cause(ctx) and none
//     matches fence.ErrBusy. Errors of InTx's function carry the guard's
//     prefix and the resource and match the function's error (errors.Is).
//   - A COMMIT of InTx or Fence whose reply is lost is settled by the
//     write's id with a locking read on a fresh connection of Config.DB,
//     which waits for the transaction to end, on a fresh context
//     (context.WithoutCancel plus Config.SettleTimeout) also when the
//     call's context has ended:
//     committed is reported as success (nil); a mark still below the
//     write's token (or none) as *fence.NotAppliedError (fence.ErrNotApplied:
//     the transaction has ended without committing); a mark above it as
//     *fence.StaleError with Overtaken set (the write may have committed
//     and been overwritten); otherwise the error is a
//     *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown; once ctx has
//     ended it matches ctx.Err() and context.Cause(ctx) too), never
//     "nothing written".
//   - Guard.CheckTable and Rows.CheckTable refuse a table that is missing
//     or lacks a column the guard uses with *TableError
//     (ErrTableMismatch); a write to such a table fails with an error
//     matching it too. New and NewRows do no I/O (the marks table may be
//     created after New, by CreateTable; Rows has no database): call
//     CheckTable at start-up.
//   - With Config.Strict (RowsConfig.Strict in in-row mode), a write whose
//     resource lies outside its claim's scope, or whose claim has no scope,
//     is refused with a *fence.ScopeError before any I/O.
//   - A stored mark the guard did not write refuses the write with
//     *fence.ForeignError and nothing is written: a token below 1 refuses every
//     write; a run that is not a valid identity refuses the writes at its
//     token, the only ones it decides (a higher token replaces it). Bad input (resource, token, run, missing claim, nil
//     arguments, key arity) is refused with a typed error before any I/O.
//     Identifiers are validated; values are bound parameters.
//
// # What is not guaranteed
//
//   - Only writes made in the fenced transaction are fenced.
//   - Lock waits are bounded by ctx and the session's
//     innodb_lock_wait_timeout (50 s unless set, for example with the DSN
//     parameter innodb_lock_wait_timeout=5).
//   - In-row mode: when the COMMIT of Upsert's own transaction loses its
//     reply the error is a *fence.OutcomeUnknownError without settling (the
//     user's row has no write id); sending the same upsert again is safe. A FenceTx caller's own COMMIT
//     is the caller's to settle (compare Mark with the claim). In-row mode
//     needs Key to be the table's only unique key.
//   - Tested on MariaDB 10.11; the SQL is MySQL 8 syntax too (VALUES() in
//     ON DUPLICATE KEY UPDATE is deprecated there but supported).
//   - Tokens of different lease keys are not comparable. Marks are never
//     deleted by this package; deleting one re-admits older tokens.
package mysqlguard
