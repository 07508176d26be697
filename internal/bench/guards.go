package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/sql/migrations"
)

// PGGuard measures the PostgreSQL guard: BEGIN + one-row upsert + COMMIT, unguarded vs BeginFenced (BEGIN
// and fence in one round trip) vs FenceTx (one more round trip), one
// connection, the three interleaved operation by operation.
func PGGuard(e *Env) error {
	schema, drop, err := e.schema(migrations.Guard)
	if err != nil {
		return err
	}
	defer drop()
	pool, err := e.pool(1, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := fmt.Sprintf("%q", schema)
	if _, err := pool.Exec(e.Ctx, `CREATE TABLE `+q+`.guarded (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`); err != nil {
		return err
	}
	upsert := `INSERT INTO ` + q + `.guarded (resource, value, token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`
	g, err := pgguard.New(pgguard.Config{Schema: schema})
	if err != nil {
		return err
	}
	ctx := e.Ctx
	var tok fence.Token
	begin := []func() (pgx.Tx, string, error){
		func() (pgx.Tx, string, error) { tx, err := pool.Begin(ctx); return tx, "plain", err },
		func() (pgx.Tx, string, error) {
			tx, err := g.BeginClaim(ctx, pool, "bf", fence.Claim{Token: tok})
			return tx, "bf", err
		},
		func() (pgx.Tx, string, error) {
			tx, err := pool.Begin(ctx)
			if err == nil {
				err = g.FenceTxClaim(ctx, tx, "ft", fence.Claim{Token: tok})
			}
			return tx, "ft", err
		},
	}
	spent := make([]time.Duration, len(begin))
	n := 0
	rounds, dur := e.rounds()
	deadline := time.Now().Add(time.Duration(rounds) * dur * 2)
	for i := 0; time.Now().Before(deadline) || n < 300; i++ {
		k := i % len(begin)
		if k == 0 {
			n++
		}
		tok++
		t0 := time.Now()
		tx, r, err := begin[k]()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, upsert, r, "value", int64(tok)); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		spent[k] += time.Since(t0)
	}
	plain := float64(spent[0]) / float64(n)
	e.Report.Add(Metric{Key: "pg_guard_overhead_ratio", Value: float64(spent[1]) / float64(spent[0]), Unit: "x", Target: 1.10, Cmp: AtMost,
		Note: fmt.Sprintf("BeginFenced+write+COMMIT vs BEGIN+write+COMMIT, %d each interleaved", n)})
	e.Report.Add(Metric{Key: "pg_guard_fencetx_ratio", Value: float64(spent[2]) / float64(spent[0]), Unit: "x", Note: "FenceTx (extra round trip) vs unguarded"})
	e.Report.Add(Metric{Key: "pg_write_tx_us", Value: plain / 1e3, Unit: "µs", Note: "unguarded BEGIN+upsert+COMMIT"})
	return nil
}

// S3Guard measures the S3 guard: plain PutObject vs guarded PutBytes of 4 KiB, alternating every
// operation, overwrite (steady state) and fresh keys (first write).
func S3Guard(e *Env) error {
	ep := os.Getenv("TEST_MINIO_ENDPOINT")
	if ep == "" {
		return fmt.Errorf("TEST_MINIO_ENDPOINT not set")
	}
	client, err := minio.New(ep, &minio.Options{Creds: credentials.NewStaticV4(os.Getenv("TEST_MINIO_ACCESS_KEY"), os.Getenv("TEST_MINIO_SECRET_KEY"), "")})
	if err != nil {
		return err
	}
	ctx := e.Ctx
	bucket := strings.ReplaceAll(randName("fk-bench-"), "_", "-")
	if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return err
	}
	defer func() {
		for o := range client.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
			_ = client.RemoveObject(context.Background(), bucket, o.Key, minio.RemoveObjectOptions{})
		}
		_ = client.RemoveBucket(context.Background(), bucket)
	}()
	body := bytes.Repeat([]byte("x"), 4<<10)
	plain := func(key string) error {
		_, err := client.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		return err
	}
	run := func(s *s3guard.Store, fresh bool, n int) (Pair, error) {
		var p Pair
		if err := plain("p"); err != nil {
			return p, err
		}
		if _, err := s.PutBytesWithToken(ctx, "g", 1, body, s3guard.PutOptions{}); err != nil {
			return p, err
		}
		for i := range n {
			pk, gk := "p", "g"
			if fresh {
				pk, gk = fmt.Sprintf("pf/%d", i), fmt.Sprintf("gf/%d", i)
			}
			t0 := time.Now()
			if err := plain(pk); err != nil {
				return p, err
			}
			t1 := time.Now()
			if _, err := s.PutBytesWithToken(ctx, gk, 1, body, s3guard.PutOptions{}); err != nil {
				return p, err
			}
			p.AddA(1, t1.Sub(t0))
			p.AddB(1, time.Since(t1))
		}
		return p, nil
	}
	n := 300
	if e.Quick {
		n = 80
	}
	for _, c := range []struct {
		key    string
		inline bool
		fresh  bool
		target bool
		note   string
	}{
		{"s3_guard_overhead_ratio", false, false, true, "overwrite, default config (GET ptr, PUT data, PUT ptr, DELETE old)"},
		{"s3_guard_inline_ratio", true, false, false, "overwrite, InlineMax 4 KiB (GET ptr, PUT ptr)"},
		{"s3_guard_first_write_ratio", false, true, false, "fresh key, default config"},
		{"s3_guard_first_write_inline_ratio", true, true, false, "fresh key, InlineMax 4 KiB"},
	} {
		cfg := s3guard.Config{Client: minioclient.New(client), Bucket: bucket}
		if c.inline {
			cfg.InlineMax = len(body)
		}
		s, err := s3guard.New(cfg)
		if err != nil {
			return err
		}
		p, err := run(s, c.fresh, n)
		if err != nil {
			return err
		}
		m := Metric{Key: c.key, Value: p.CostRatio(), Unit: "x", Note: fmt.Sprintf("%s, %d pairs", c.note, n)}
		if c.target {
			m.Target, m.Cmp = 1.3, AtMost
		}
		e.Report.Add(m)
	}
	return nil
}
