package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/pgerr"
	"github.com/fencekit/fencekit/sql/migrations"
)

// CheckClaimTx checks, inside the caller's transaction tx on the lease
// database, that claim is the current grant of key: the key's row in
// schema's fencekit_leases carries claim.Run as run_id and claim.Token as
// fence_token, and is live on the database clock (the same definition of
// "live" as every lease statement, heartbeat rows included). It locks that
// row FOR SHARE until tx ends, so a grant of the key to another run (a
// Takeover, or an Acquire after expiry), which updates the row, waits for
// tx to end: a grant committed before this check makes it fail, and a grant
// requested after it is ordered after tx's commit. Work that tx commits
// after a nil return was therefore done while claim held the key. The lock
// also delays, until tx ends, the holder's own per-lease renewal and
// release of the key: keep tx short.
//
// Errors: fence.ErrNilArgument (nil ctx or tx), a *KeyError, the claim's
// own validation errors (fence.ErrInvalidToken, fence.ErrInvalidRun, also
// for a claim with no run or a run that is not a UUID), an error matching
// migrations.ErrInvalidIdentifier for schema, and a
// *fence.ScopeError when the claim carries a scope other than key.Scope(),
// all before any I/O. When the claim is not current the error matches
// fence.ErrStale (it wraps a *fence.StaleError whose Highest is the row's
// token, or the claim's own when the row has the same token but is no
// longer live) and, when known, ErrReleased or ErrLost; a claim whose token
// is the row's but whose run is not is a *fence.ReusedError. Lock timeout,
// serialization failure and deadlock match fence.ErrBusy. A schema not
// migrated yields a *migrations.NotMigratedError. CheckClaimTx never rolls
// tx back: after a non-nil error the caller must not commit work that
// relied on the claim.
func CheckClaimTx(ctx context.Context, tx pgx.Tx, schema string, key Key, claim fence.Claim) error {
	if ctx == nil {
		return fmt.Errorf("lease: CheckClaimTx with nil ctx: %w", fence.ErrNilArgument)
	}
	if tx == nil {
		return fmt.Errorf("lease: CheckClaimTx with nil tx: %w", fence.ErrNilArgument)
	}
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return err
	}
	if err := key.Validate(); err != nil {
		return err
	}
	if err := claim.Validate(); err != nil {
		return err
	}
	if claim.Run == "" {
		return fmt.Errorf("%w: the claim has no run identity; a lease claim (Lease.Context) carries one", fence.ErrInvalidRun)
	}
	if _, err := uuid.Parse(claim.Run); err != nil {
		return fmt.Errorf("%w: %q is not a lease run_id (UUID)", fence.ErrInvalidRun, claim.Run)
	}
	if claim.Scope != "" && claim.Scope != key.Scope() {
		return &fence.ScopeError{Resource: key.Scope(), Scope: claim.Scope}
	}
	if err := fence.ContextError(ctx); err != nil {
		return err
	}
	var (
		run            string
		token          int64
		live, released bool
	)
	err = tx.QueryRow(ctx, checkClaimSQL(q), key.AccountID, key.SessionID).
		Scan(&run, &token, &live, &released)
	resource := key.Scope()
	stale := func(reason string, highest int64, causes ...error) error {
		if highest < int64(claim.Token) {
			highest = int64(claim.Token)
		}
		se := &fence.StaleError{Resource: resource, Presented: claim.Token, Highest: fence.Token(highest)}
		errs := append([]any{key, claim.Token, claim.Run, reason, se}, anySlice(causes)...)
		return fmt.Errorf("lease: %s: claim (token %d, run %s) is not current: %s: %w"+strings.Repeat(": %w", len(causes)), errs...)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return stale("the key has no lease row", 0, ErrLost)
	case err != nil:
		return checkClaimError(ctx, schema, err)
	case run == claim.Run && token == int64(claim.Token) && live:
		return nil
	case run == claim.Run && token == int64(claim.Token) && released:
		return stale("the lease was released", token, ErrReleased)
	case run == claim.Run && token == int64(claim.Token):
		return stale("the lease expired", token, ErrLost)
	case token == int64(claim.Token):
		return &fence.ReusedError{Resource: resource, Token: claim.Token, Run: claim.Run, MarkRun: run}
	default:
		return stale(fmt.Sprintf("the key was granted to run %s with token %d", run, token), token, ErrLost)
	}
}

func anySlice(errs []error) []any {
	out := make([]any, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return out
}

// checkClaimSQL reads and share-locks the key's row ($1 account, $2
// session) in the schema quoted q: its run, token, whether it is live
// (liveSQL, at one clock reading of the statement) and whether it was
// released. FOR SHARE conflicts with the row lock of every grant and
// release statement (they update the row); in READ COMMITTED a row updated
// while this statement waited is read again in its new version.
func checkClaimSQL(q string) string {
	return strings.ReplaceAll(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT l.run_id::text, l.fence_token, coalesce(`+liveSQL("l", "n.t")+`, false), l.released_at IS NOT NULL
  FROM $S.fencekit_leases l, now_db n
 WHERE l.account_id = $1::text AND l.session_id = $2::text
   FOR SHARE OF l`, "$S", q)
}

// checkClaimError maps a database error of the check.
func checkClaimError(ctx context.Context, schema string, err error) error {
	if fence.ContextError(ctx) != nil {
		return fence.WrapContext(ctx, fmt.Errorf("lease: check claim: %w", err))
	}
	if pgerr.Busy(err) {
		return fmt.Errorf("lease: check claim: %s: %w: %w", pgerr.Code(err), fence.ErrBusy, err)
	}
	return migrations.NotMigrated(schema, fmt.Errorf("lease: check claim: %w", err))
}
