package lease

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The grant and release statements of a Manager, alone or shared
// (coalesce.go).

// grantReq is one grant: key to run under ep.
type grantReq struct {
	key    Key
	run    uuid.UUID
	holder *string
	ep     *epoch
}

// grantResult is what the acquire statement returned for one key: a token
// and (per-lease) expiry when granted, pgx.ErrNoRows when refused, or the
// statement's error.
type grantResult struct {
	token   int64
	expires pgtype.Timestamptz
	err     error
}

func newGrants(m *Manager) *coalescer[grantReq, grantResult] {
	return &coalescer[grantReq, grantResult]{
		key:   func(q grantReq) Key { return q.key },
		group: func(q grantReq) *epoch { return q.ep },
		one:   m.grantOne,
		many:  m.grantMany,
		// A grant made for a caller who left, or whose outcome is unknown,
		// is released as a lost reply's is.
		left: func(ctx context.Context, q grantReq, r grantResult) {
			if !errors.Is(r.err, pgx.ErrNoRows) {
				m.releaseOrphan(ctx, q.key, q.run, q.ep)
			}
		},
	}
}

// grantOne is the acquire statement for one key.
func (m *Manager) grantOne(ctx context.Context, q grantReq) (res grantResult) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	res.err = m.pool.QueryRow(cctx, m.st.acquire, q.key.AccountID, q.key.SessionID, uuidParam(q.run), m.ttlArg, q.holder, epochID(q.ep)).
		Scan(&res.token, &res.expires)
	return res
}

// grantMany is the shared acquire statement for qs (distinct keys, one
// epoch).
func (m *Manager) grantMany(ctx context.Context, qs []grantReq) []grantResult {
	results := make([]grantResult, len(qs))
	accounts, sessions, runs, holders := make([]string, len(qs)), make([]string, len(qs)), make([]string, len(qs)), make([]*string, len(qs))
	at := make(map[uuid.UUID]int, len(qs))
	for i, q := range qs {
		accounts[i], sessions[i], runs[i], holders[i] = q.key.AccountID, q.key.SessionID, q.run.String(), q.holder
		at[q.run] = i
		results[i].err = pgx.ErrNoRows // refused unless its row comes back
	}
	sql, last := m.st.acquireBatch[1], m.ttlArg
	if ep := qs[0].ep; ep != nil {
		sql, last = m.st.acquireBatch[0], ep.param
	}
	err := m.queryShared(ctx, sql, func(rows pgx.Rows) error {
		var (
			run uuid.UUID
			res grantResult
		)
		if err := rows.Scan(&run, &res.token, &res.expires); err != nil {
			return err
		}
		if i, ok := at[run]; ok {
			results[i] = res
		}
		return nil
	}, accounts, sessions, runs, holders, last)
	if err != nil {
		for i := range results {
			results[i] = grantResult{err: err}
		}
	}
	return results
}

// releaseReq is one release of key's run.
type releaseReq struct {
	key Key
	run uuid.UUID
}

// releaseResult is what the release statement returned for one run:
// released (the NOTIFY sent or not), pgx.ErrNoRows when nothing was
// released, or the statement's error.
type releaseResult struct {
	notified bool
	err      error
}

func newReleases(m *Manager) *coalescer[releaseReq, releaseResult] {
	return &coalescer[releaseReq, releaseResult]{
		key:   func(q releaseReq) Key { return q.key },
		group: func(releaseReq) *epoch { return nil },
		one:   m.releaseOne,
		many:  m.releaseMany,
		// The caller who left records its run as unconfirmed (Release), so
		// a release whose outcome it did not see is sent again.
		left: func(context.Context, releaseReq, releaseResult) {},
	}
}

// releaseOne is the release statement for one run.
func (m *Manager) releaseOne(ctx context.Context, q releaseReq) (res releaseResult) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	res.err = m.pool.QueryRow(cctx, m.st.release, q.key.AccountID, q.key.SessionID, uuidParam(q.run), m.channelArg, keyPayload(q.key)).
		Scan(&res.notified)
	return res
}

// releaseMany is the shared release statement for qs (distinct keys).
func (m *Manager) releaseMany(ctx context.Context, qs []releaseReq) []releaseResult {
	results := make([]releaseResult, len(qs))
	accounts, sessions, runs, payloads := make([]string, len(qs)), make([]string, len(qs)), make([]string, len(qs)), make([]string, len(qs))
	at := make(map[uuid.UUID]int, len(qs))
	for i, q := range qs {
		accounts[i], sessions[i], runs[i], payloads[i] = q.key.AccountID, q.key.SessionID, q.run.String(), keyPayload(q.key)
		at[q.run] = i
		results[i].err = pgx.ErrNoRows // not released unless its row comes back
	}
	err := m.queryShared(ctx, m.st.releaseShared, func(rows pgx.Rows) error {
		var (
			run uuid.UUID
			res releaseResult
		)
		if err := rows.Scan(&run, &res.notified); err != nil {
			return err
		}
		if i, ok := at[run]; ok {
			results[i] = res
		}
		return nil
	}, accounts, sessions, runs, payloads, m.channelArg)
	if err != nil {
		for i := range results {
			results[i] = releaseResult{err: err}
		}
	}
	return results
}

// queryShared runs a shared statement, bounded by CallTimeout, and calls
// row for each row it returns.
func (m *Manager) queryShared(ctx context.Context, sql string, row func(pgx.Rows) error, args ...any) error {
	cctx, cancel := m.call(ctx)
	defer cancel()
	rows, err := m.pool.Query(cctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
