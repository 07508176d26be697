package effects_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// BenchmarkRecord compares Record (its own transaction: lock_timeout, the
// lease-row check, the insert, COMMIT) with the same row inserted through
// pgguard's InTx (BEGIN and the mark's fence statement in one batch, the
// insert, COMMIT), on one connection each, one at a time.
//
//	go test -run '^$' -bench BenchmarkRecord -benchtime 2000x -count 4 ./effects
func BenchmarkRecord(b *testing.B) {
	schema := fencetest.Schema(b, migrations.Lease, migrations.Guard, migrations.Effects)
	m, err := lease.New(lease.Config{Pool: fencetest.Pool(b), Schema: schema, TTL: time.Minute})
	require.NoError(b, err)
	b.Cleanup(func() { _ = m.Close() })
	key := lease.Key{AccountID: "bench", SessionID: fencetest.RandomName("")}
	l, err := m.Acquire(context.Background(), key)
	require.NoError(b, err)
	req, err := effects.HTTPRequest{Method: "POST", URL: "http://127.0.0.1:1/x", Body: []byte(`{"amount":1}`)}.Freeze()
	require.NoError(b, err)
	pool := fencetest.Pool(b)

	b.Run("effects_record", func(b *testing.B) {
		o, err := effects.New(effects.Config{Pool: pool, Schema: schema, Targets: []effects.Target{{Name: "pay", Deliverer: &effects.HTTP{}}}})
		require.NoError(b, err)
		prefix := fencetest.RandomName("r") // each call of this function records new keys
		for i := 0; b.Loop(); i++ {
			if _, err := o.Record(l.Context(), effects.Effect{Target: "pay", RequestKey: fmt.Sprintf("%s-%d", prefix, i), Request: req}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pgguard_intx", func(b *testing.B) {
		g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
		require.NoError(b, err)
		ins := fmt.Sprintf(`INSERT INTO %q.fencekit_effects (target, account_id, session_id, run_id, fence_token, request_key, request, next_at, created_at, updated_at)
VALUES ('pay', $1, $2, $3::uuid, $4, $5, $6, now(), now(), now())`, schema)
		res := key.Resource("effects")
		run := l.RunID().String()
		prefix := fencetest.RandomName("g")
		for i := 0; b.Loop(); i++ {
			err := g.InTx(l.Context(), res, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, ins, key.AccountID, key.SessionID, run, int64(l.Token()), fmt.Sprintf("%s-%d", prefix, i), req)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
