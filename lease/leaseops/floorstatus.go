package leaseops

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// ErrStandby is what FloorReport.Refused returns for a database in
// recovery (a standby): it grants nothing until it is promoted.
var ErrStandby = errors.New("leaseops: the database is a standby (in recovery) and grants nothing")

// statusSQL reads the floor row, the sequence and the node in one
// statement; on a standby it does not ask for the node (the WAL position
// it is made of exists only on a primary).
func statusSQL(q string) string {
	return strings.ReplaceAll(`SELECT coalesce(f.floor, 0), f.updated_at, coalesce(f.checked_node, ''), s.last_value, s.is_called, r.rec,
       CASE WHEN r.rec THEN '' ELSE $S.fencekit_node() END
  FROM $S.fencekit_token_seq s
 CROSS JOIN (SELECT pg_is_in_recovery() AS rec) r
  LEFT JOIN $S.fencekit_token_floor f ON f.id`, "$S", q)
}

// Status reads the schema's token floor state in one statement: the stored
// floor, the next token, the node the floor was checked on and the node it
// runs on. It changes nothing and does not call the Source; it works on a
// standby too. FloorReport.Refused tells whether grants are refused there.
// It needs SELECT on the sequence and on fencekit_token_floor (granted to
// PUBLIC by migration 0004).
func (f *TokenFloor) Status(ctx context.Context) (FloorReport, error) {
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	var (
		st      FloorReport
		stored  int64
		updated *time.Time
		last    int64
		called  bool
	)
	q, err := migrations.QuoteIdentifier(f.cfg.Schema) // validated by NewTokenFloor
	if err != nil {
		return FloorReport{}, err
	}
	err = f.cfg.Pool.QueryRow(cctx, statusSQL(q)).Scan(&stored, &updated, &st.CheckedNode, &last, &called, &st.InRecovery, &st.Node)
	if err != nil {
		return FloorReport{}, f.dbError("read token floor status", err)
	}
	st.Stored, st.Next = fence.Token(stored), nextValue(last, called)
	if updated != nil {
		st.UpdatedAt = *updated
	}
	return st, nil
}
