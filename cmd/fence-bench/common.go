package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/sql/migrations"
)

func randName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// schema creates a private schema with the given migration sets; drop it
// with the returned func.
func (e *env) schema(sets ...migrations.Set) (string, func(), error) {
	pool, err := pgxpool.New(e.ctx, e.dbURL)
	if err != nil {
		return "", nil, err
	}
	name := randName("fk_bench_")
	if _, err := migrations.Migrate(e.ctx, pool, migrations.Options{Schema: name}, sets...); err != nil {
		pool.Close()
		return "", nil, err
	}
	return name, func() {
		_ = migrations.DropSchema(context.Background(), pool, name)
		pool.Close()
	}, nil
}

// counter is a pgx tracer counting statements (single queries and each
// query of a batch), optionally only those containing a substring.
type counter struct {
	n      atomic.Int64
	match  map[string]*atomic.Int64
	matchD map[string]*atomic.Int64 // total duration ns of matching queries
}

func newCounter(subs ...string) *counter {
	c := &counter{match: map[string]*atomic.Int64{}, matchD: map[string]*atomic.Int64{}}
	for _, s := range subs {
		c.match[s], c.matchD[s] = new(atomic.Int64), new(atomic.Int64)
	}
	return c
}

type startKey struct{}

func (c *counter) see(sql string) {
	c.n.Add(1)
	for s, n := range c.match {
		if strings.Contains(sql, s) {
			n.Add(1)
		}
	}
}

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.see(d.SQL)
	return context.WithValue(ctx, startKey{}, [2]any{d.SQL, time.Now()})
}

func (c *counter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	v, ok := ctx.Value(startKey{}).([2]any)
	if !ok {
		return
	}
	sql, t0 := v[0].(string), v[1].(time.Time)
	for s, d := range c.matchD {
		if strings.Contains(sql, s) {
			d.Add(int64(time.Since(t0)))
		}
	}
}

func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		c.see(q.SQL)
	}
	return ctx
}

func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (e *env) pool(maxConns int32, tracer any) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if t, ok := tracer.(pgx.QueryTracer); ok {
		cfg.ConnConfig.Tracer = t
	}
	return pgxpool.NewWithConfig(e.ctx, cfg)
}

// postgresCPU returns the user+system CPU time consumed so far by every
// process named postgres visible in /proc (the server is local).
func postgresCPU() (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, d := range ents {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < 0 || s[i+1:j] != "postgres" {
			continue
		}
		f := strings.Fields(s[j+2:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		sy, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + sy
	}
	return time.Duration(ticks) * (time.Second / 100), nil // USER_HZ = 100 on Linux
}

func xactCommits(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}
