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

// BenchmarkRecord compares Record (its own implicit transaction:
// lock_timeout and the one record statement, lease-row check and insert,
// in one round trip) with the same row inserted through pgguard's InTx
// (BEGIN and the mark's fence statement in one batch, the insert, COMMIT),
// one call at a time: each side alone, and both alternately
// (interleaved, which reports the ratio record/intx).
//
//	go test -run '^$' -bench 'BenchmarkRecord' -count 6 ./effects
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

	o, err := effects.New(effects.Config{Pool: pool, Schema: schema, Targets: []effects.Target{{Name: "pay", Deliverer: &effects.HTTP{}}}})
	require.NoError(b, err)
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	require.NoError(b, err)
	ins := fmt.Sprintf(`INSERT INTO %q.fencekit_effects (target, account_id, session_id, run_id, fence_token, request_key, request, next_at, created_at, updated_at)
VALUES ('pay', $1, $2, $3::uuid, $4, $5, $6, now(), now(), now())`, schema)
	res := key.Resource("effects")
	run := l.RunID().String()
	record := func(b *testing.B, rk string) {
		if _, err := o.Record(l.Context(), effects.Effect{Target: "pay", RequestKey: rk, Request: req}); err != nil {
			b.Fatal(err)
		}
	}
	inTx := func(b *testing.B, rk string) {
		err := g.InTx(l.Context(), res, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, ins, key.AccountID, key.SessionID, run, int64(l.Token()), rk, req)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}

	b.Run("effects_record", func(b *testing.B) {
		prefix := fencetest.RandomName("r") // each call of this function records new keys
		for i := 0; b.Loop(); i++ {
			record(b, fmt.Sprintf("%s-%d", prefix, i))
		}
	})
	b.Run("pgguard_intx", func(b *testing.B) {
		prefix := fencetest.RandomName("g")
		for i := 0; b.Loop(); i++ {
			inTx(b, fmt.Sprintf("%s-%d", prefix, i))
		}
	})
	// Both sides alternately, each op timed: the ratio of the two sides'
	// mean times in the same stretch of machine load.
	b.Run("interleaved", func(b *testing.B) {
		prefix := fencetest.RandomName("i")
		var tr, tg time.Duration
		for i := 0; b.Loop(); i++ {
			t0 := time.Now()
			record(b, fmt.Sprintf("%s-r%d", prefix, i))
			t1 := time.Now()
			inTx(b, fmt.Sprintf("%s-g%d", prefix, i))
			tr, tg = tr+t1.Sub(t0), tg+time.Since(t1)
		}
		b.ReportMetric(float64(tr.Nanoseconds())/float64(b.N), "record-ns/op")
		b.ReportMetric(float64(tg.Nanoseconds())/float64(b.N), "intx-ns/op")
		b.ReportMetric(float64(tr)/float64(tg), "record/intx")
	})
}
