package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/awsclient"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
	"github.com/fencekit/fencekit/sql/migrations"
)

// pgGuardKeys and s3GuardKeys are every key PGGuard and S3Guard report,
// set to NaN when the case fails before reporting them.
var (
	pgGuardKeys = []string{"pg_guard_overhead_ratio", "pg_guard_fencetx_ratio", "pg_guard_intx_ratio",
		"pg_guard_sql_intx_ratio", "pg_guard_rows_ratio", "pg_guard_rows_sql_ratio",
		"pg_write_tx_us", "pg_sql_write_tx_us", "pg_upsert_us", "pg_sql_upsert_us"}
	s3GuardKeys = []string{"s3_guard_overhead_ratio", "s3_guard_inline_ratio", "s3_guard_first_write_ratio",
		"s3_guard_first_write_inline_ratio", "s3_guard_aws_overhead_ratio", "s3_guard_aws_inline_ratio",
		"s3_guard_aws_first_write_ratio", "s3_guard_aws_first_write_inline_ratio"}
)

// nullMissing adds every key of keys not yet reported as not measured.
func (e *Env) nullMissing(keys []string, note string) {
	for _, k := range keys {
		if _, ok := e.Report.Get(k); !ok {
			e.Report.Add(Metric{Key: k, Value: math.NaN(), Note: note})
		}
	}
}

// ratioBlocks is how many blocks of consecutive rounds a guard ratio is
// taken over: the reported value is the median of the blocks' ratios
// (robust to a stall in one operation), their spread its min/median/max.
const ratioBlocks = 10

// benchRun is the run identity of the bench's claims, in the form a
// lease's context carries (canonical UUID text).
func benchRun() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// PGGuard measures the PostgreSQL guard against the same unguarded writes,
// one pgx connection and one database/sql connection (pgx's stdlib
// driver), every side interleaved operation by operation (order rotated
// each round). Marks mode: BEGIN + one-row upsert + COMMIT unguarded, vs
// BeginClaim (BEGIN and fence in one round trip), FenceTxClaim (one more
// round trip) and InTx (claim from the context) on pgx, and vs InSQLTx on
// database/sql. In-row mode: the single unguarded upsert (autocommit) vs
// Rows.Upsert on pgx and Rows.UpsertSQL on database/sql, on one table
// whose rows keep their token and run.
func PGGuard(e *Env) (err error) {
	defer func() {
		if err != nil {
			e.nullMissing(pgGuardKeys, "failed: pg_guard")
		}
	}()
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
	db, err := sql.Open("pgx", e.DBURL)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	ctx := e.Ctx
	q := fmt.Sprintf("%q", schema)
	if _, err := pool.Exec(ctx, `CREATE TABLE `+q+`.guarded (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+q+`.docs (resource text PRIMARY KEY, value text NOT NULL,
fence_token bigint NOT NULL, fence_run text NOT NULL DEFAULT '')`); err != nil {
		return err
	}
	upsert := `INSERT INTO ` + q + `.guarded (resource, value, token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`
	upsertRow := `INSERT INTO ` + q + `.docs (resource, value, fence_token, fence_run) VALUES ($1, $2, $3, $4)
ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, fence_token = EXCLUDED.fence_token, fence_run = EXCLUDED.fence_run`
	g, err := pgguard.New(pgguard.Config{DB: pool, SQLDB: db, Schema: schema})
	if err != nil {
		return err
	}
	rows, err := pgguard.NewRows(pgguard.RowsConfig{Schema: schema, Table: "docs", Key: []string{"resource"},
		Columns: []string{"value"}, RunColumn: "fence_run"})
	if err != nil {
		return err
	}
	run := benchRun()
	var tok fence.Token
	claim := func() fence.Claim { tok++; return fence.Claim{Token: tok, Run: run} }
	pgxTx := func(r string, begin func(fence.Claim) (pgx.Tx, error)) func(int) error {
		return func(int) error {
			c := claim()
			tx, err := begin(c)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, upsert, r, "value", int64(c.Token)); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}
	}
	sqlWrite := func(ctx context.Context, tx *sql.Tx, r string, t fence.Token) error {
		_, err := tx.ExecContext(ctx, upsert, r, "value", int64(t))
		return err
	}
	const (
		plainTx = iota
		beginClaim
		fenceTx
		inTx
		plainSQLTx
		inSQLTx
		plainUpsert
		rowsUpsert
		plainSQLUpsert
		rowsSQLUpsert
	)
	ops := []Op{
		plainTx: {"plain tx", pgxTx("plain", func(fence.Claim) (pgx.Tx, error) { return pool.Begin(ctx) })},
		beginClaim: {"BeginClaim", pgxTx("bf", func(c fence.Claim) (pgx.Tx, error) {
			return g.Begin(fence.WithClaim(ctx, c), "bf")
		})},
		fenceTx: {"FenceTxClaim", pgxTx("ft", func(c fence.Claim) (pgx.Tx, error) {
			tx, err := pool.Begin(ctx)
			if err == nil {
				err = g.FenceTx(fence.WithClaim(ctx, c), tx, "ft")
			}
			return tx, err
		})},
		inTx: {"InTx", func(int) error {
			c := claim()
			return g.InTx(fence.WithClaim(ctx, c), "intx", func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upsert, "intx", "value", int64(c.Token))
				return err
			})
		}},
		plainSQLTx: {"plain sql tx", func(int) error {
			c := claim()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := sqlWrite(ctx, tx, "sqlplain", c.Token); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
		inSQLTx: {"InSQLTx", func(int) error {
			c := claim()
			return g.InSQLTx(fence.WithClaim(ctx, c), "sqlintx", func(ctx context.Context, tx *sql.Tx) error {
				return sqlWrite(ctx, tx, "sqlintx", c.Token)
			})
		}},
		plainUpsert: {"plain upsert", func(int) error {
			c := claim()
			_, err := pool.Exec(ctx, upsertRow, "plain", "value", int64(c.Token), c.Run)
			return err
		}},
		rowsUpsert: {"Rows.Upsert", func(int) error {
			return rows.Upsert(fence.WithClaim(ctx, claim()), pool, []any{"rows"}, "value")
		}},
		plainSQLUpsert: {"plain sql upsert", func(int) error {
			c := claim()
			_, err := db.ExecContext(ctx, upsertRow, "sqlplain", "value", int64(c.Token), c.Run)
			return err
		}},
		rowsSQLUpsert: {"Rows.UpsertSQL", func(int) error {
			return rows.UpsertSQL(fence.WithClaim(ctx, claim()), db, []any{"sqlrows"}, "value")
		}},
	}
	rounds, dur := e.rounds()
	minRounds := 300
	if e.Quick {
		minRounds = 100
	}
	in, err := Interleave(ops, minRounds, time.Now().Add(time.Duration(rounds)*dur*2))
	if err != nil {
		return err
	}
	n := in.Rounds()
	ratio := func(key string, b, a int, target float64, note string) {
		_, sp := in.Ratio(b, a, ratioBlocks)
		m := Metric{Key: key, Value: sp.Median, Unit: "x", Note: note, Spread: &sp}
		if target > 0 {
			m.Target, m.Cmp = target, AtMost
		}
		e.Report.Add(m)
	}
	us := func(key string, k int, note string) {
		e.Report.Add(Metric{Key: key, Value: float64(in.PerOp(k)) / 1e3, Unit: "µs", Note: note})
	}
	ratio("pg_guard_overhead_ratio", beginClaim, plainTx, 1.10,
		fmt.Sprintf("marks mode, pgx: BeginClaim+write+COMMIT vs BEGIN+write+COMMIT; %d rounds of 10 sides interleaved, median of %d blocks of rounds", n, ratioBlocks))
	ratio("pg_guard_fencetx_ratio", fenceTx, plainTx, 0, "marks mode, pgx: BEGIN+FenceTxClaim (extra round trip)+write+COMMIT vs unguarded")
	ratio("pg_guard_intx_ratio", inTx, plainTx, 1.10, "marks mode, pgx: InTx (claim from ctx)+write vs unguarded BEGIN+write+COMMIT")
	ratio("pg_guard_sql_intx_ratio", inSQLTx, plainSQLTx, 1.15, "marks mode, database/sql (pgx stdlib): InSQLTx+write vs BeginTx+write+Commit")
	ratio("pg_guard_rows_ratio", rowsUpsert, plainUpsert, 1.05, "in-row mode, pgx: Rows.Upsert vs the unguarded upsert (one statement, autocommit)")
	ratio("pg_guard_rows_sql_ratio", rowsSQLUpsert, plainSQLUpsert, 1.05, "in-row mode, database/sql: Rows.UpsertSQL vs the unguarded upsert")
	us("pg_write_tx_us", plainTx, "unguarded BEGIN+upsert+COMMIT, pgx")
	us("pg_sql_write_tx_us", plainSQLTx, "unguarded BeginTx+upsert+Commit, database/sql")
	us("pg_upsert_us", plainUpsert, "unguarded upsert, autocommit, pgx")
	us("pg_sql_upsert_us", plainSQLUpsert, "unguarded upsert, autocommit, database/sql")
	return nil
}

// S3Guard measures the S3 guard through both adapters (minioclient on
// minio-go, awsclient on aws-sdk-go-v2) against MinIO: per adapter, a plain
// PutObject of 4 KiB through that SDK vs guarded PutBytesWithToken, default
// layout (data object + pointer) and InlineMax 4 KiB, overwriting one key
// (steady state) and writing fresh keys (first write). The twelve sides run
// interleaved operation by operation, order rotated each round.
func S3Guard(e *Env) (err error) {
	defer func() {
		if err != nil {
			e.nullMissing(s3GuardKeys, "failed: s3_guard")
		}
	}()
	ep := os.Getenv("TEST_MINIO_ENDPOINT")
	if ep == "" {
		return fmt.Errorf("TEST_MINIO_ENDPOINT not set")
	}
	access, secret := os.Getenv("TEST_MINIO_ACCESS_KEY"), os.Getenv("TEST_MINIO_SECRET_KEY")
	client, err := minio.New(ep, &minio.Options{Creds: credentials.NewStaticV4(access, secret, "")})
	if err != nil {
		return err
	}
	awsC := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://" + ep),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: access, SecretAccessKey: secret, Source: "fence-bench"}, nil
		}),
	})
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
	type adapter struct {
		name   string
		client s3client.Client
		plain  func(key string) error
		prefix string // key prefix and metric key infix
	}
	adapters := []adapter{
		{"minio-go", minioclient.New(client), func(key string) error {
			_, err := client.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
			return err
		}, ""},
		{"aws-sdk-go-v2", awsclient.New(awsC), func(key string) error {
			_, err := awsC.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
				Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
			return err
		}, "aws_"},
	}
	type variant struct {
		key    string // metric key without the s3_guard_ prefix and adapter infix
		inline bool
		fresh  bool
		target float64
		note   string
	}
	variants := []variant{
		{"overhead_ratio", false, false, 1.3, "overwrite, default layout (PUT data, conditional PUT ptr, DELETE old; pointer cached)"},
		{"inline_ratio", true, false, 1.0, "overwrite, InlineMax 4 KiB (one conditional PUT ptr; pointer cached)"},
		{"first_write_ratio", false, true, 0, "fresh key, default layout (GET ptr 404, PUT data, PUT ptr)"},
		{"first_write_inline_ratio", true, true, 0, "fresh key, InlineMax 4 KiB (GET ptr 404, PUT ptr)"},
	}
	type pair struct {
		key      string
		base, op int
		target   float64
		note     string
	}
	var ops []Op
	var pairs []pair
	for _, a := range adapters {
		plainOver, plainFresh := len(ops), len(ops)+1
		ops = append(ops,
			Op{a.name + " plain overwrite", func(int) error { return a.plain(a.name + "/p") }},
			Op{a.name + " plain fresh", func(r int) error { return a.plain(fmt.Sprintf("%s/pf/%d", a.name, r)) }})
		for _, v := range variants {
			cfg := s3guard.Config{Client: a.client, Bucket: bucket}
			if v.inline {
				cfg.InlineMax = len(body)
			}
			s, err := s3guard.New(cfg)
			if err != nil {
				return err
			}
			base, name := plainOver, fmt.Sprintf("%s/g-%s", a.name, v.key)
			if v.fresh {
				base = plainFresh
			}
			pairs = append(pairs, pair{"s3_guard_" + a.prefix + v.key, base, len(ops), v.target, a.name + ": " + v.note})
			fresh := v.fresh
			ops = append(ops, Op{a.name + " " + v.key, func(r int) error {
				k := name
				if fresh {
					k = fmt.Sprintf("%s/%d", name, r)
				}
				_, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 1)), k, body, s3guard.PutOptions{})
				return err
			}})
		}
	}
	n := 300
	if e.Quick {
		n = 60
	}
	in, err := Interleave(ops, n, time.Time{})
	if err != nil {
		return err
	}
	for i, p := range pairs {
		_, sp := in.Ratio(p.op, p.base, ratioBlocks)
		note := p.note
		if i == 0 {
			note += fmt.Sprintf("; %d rounds of %d sides interleaved, median of %d blocks of rounds", in.Rounds(), len(ops), ratioBlocks)
		}
		m := Metric{Key: p.key, Value: sp.Median, Unit: "x", Note: note, Spread: &sp}
		if p.target > 0 {
			m.Target, m.Cmp = p.target, AtMost
		}
		e.Report.Add(m)
	}
	return nil
}
