package hostile

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/sql/migrations"
)

// badResources are refused by fence.ValidateResource, hence by every guard.
var badResources = []string{
	"", strings.Repeat("r", fence.MaxResourceLen+1), "a\x00b", "a\nb", "a\rb", "\t", "\x7f", "\xff\xfe", string([]byte{'a', 0xc3}),
}

// badTokens are not valid tokens.
var badTokens = []fence.Token{0, -1, math.MinInt64}

// guardUnderTest is one guard with a way to snapshot its store.
type guardUnderTest struct {
	name     string
	g        fence.Guard
	snapshot func(t *testing.T) string // the whole store's state, to prove nothing changed
}

func pgSnapshot(pool *pgxpool.Pool, schema string) func(t *testing.T) string {
	return func(t *testing.T) string {
		var s string
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT coalesce(string_agg(resource || '=' || highest_token, ',' ORDER BY resource), '') FROM "`+schema+`".fencekit_guard_marks`).Scan(&s))
		return s
	}
}

func s3Snapshot(mc *minio.Client, bucket string) func(t *testing.T) string {
	return func(t *testing.T) string {
		var b strings.Builder
		for obj := range mc.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
			require.NoError(t, obj.Err)
			b.WriteString(obj.Key + "=" + obj.ETag + ",")
		}
		return b.String()
	}
}

// guards builds every guard over its real store, each with one accepted
// write already in place (so "nothing changed" is checked against a
// non-empty store).
func guards(t *testing.T) []guardUnderTest {
	ctx := testCtx(t)
	mem, err := memguard.New(memguard.Config{})
	require.NoError(t, err)

	schema := fencetest.Schema(t, migrations.Guard)
	pool := fencetest.Pool(t)
	pg, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	require.NoError(t, err)

	mc, bucket := fencetest.Bucket(t)
	s3, err := s3guard.New(s3guard.Config{Client: minioclient.New(mc), Bucket: bucket})
	require.NoError(t, err)

	// HTTP: the client Transport in front of the middleware over a
	// memguard; the handler counts its calls.
	httpMem, err := memguard.New(memguard.Config{})
	require.NoError(t, err)
	mw, err := httpguard.Middleware(httpMem, httpguard.Config{})
	require.NoError(t, err)
	var handled atomic.Int64
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})))
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: &httpguard.Transport{Base: tr}}
	httpG := httpClientGuard{client: client, url: srv.URL}

	out := []guardUnderTest{
		{name: "memguard", g: mem, snapshot: func(*testing.T) string { return markOf(mem, "keep").String() }},
		{name: "pgguard", g: pg, snapshot: pgSnapshot(pool, schema)},
		{name: "s3guard", g: s3, snapshot: s3Snapshot(mc, bucket)},
		{name: "httpguard", g: httpG, snapshot: func(*testing.T) string {
			return markOf(httpMem, "keep").String() + "/" + string(rune('0'+handled.Load()))
		}},
	}
	for _, gu := range out {
		write := func(ctx context.Context) error { return nil }
		if gu.name == "s3guard" {
			write = func(ctx context.Context) error {
				return s3guard.Stage(ctx, strings.NewReader("v"), 1, s3guard.PutOptions{})
			}
		}
		require.NoError(t, gu.g.Fence(ctx, "keep", 5, write), gu.name)
	}
	return out
}

// httpClientGuard adapts the HTTP client side to fence.Guard: Fence sends
// one request with the token and resource in its context; write is not
// used (the server's handler is the write).
type httpClientGuard struct {
	client *http.Client
	url    string
}

func (h httpClientGuard) Fence(ctx context.Context, resource string, token fence.Token, write func(context.Context) error) error {
	ctx = httpguard.WithResource(fence.WithToken(ctx, token), resource)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, nil)
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return httpguard.ErrorFromResponse(resp)
}

// TestBadInputThroughEveryGuard: every guard refuses every bad resource and
// bad token with a typed error (matching fence.ErrInvalidResource or
// fence.ErrInvalidToken), never calls write, changes nothing in its store
// and does not panic.
func TestBadInputThroughEveryGuard(t *testing.T) {
	ctx := testCtx(t)
	for _, gu := range guards(t) {
		t.Run(gu.name, func(t *testing.T) {
			before := gu.snapshot(t)
			called := false
			write := func(context.Context) error { called = true; return nil }
			for _, r := range badResources {
				notPanics(t, gu.name+" bad resource", func() {
					err := gu.g.Fence(ctx, r, 9, write)
					assert.ErrorIs(t, err, fence.ErrInvalidResource, "%s resource %q", gu.name, r)
				})
			}
			for _, tok := range badTokens {
				notPanics(t, gu.name+" bad token", func() {
					err := gu.g.Fence(ctx, "keep", tok, write)
					switch gu.name {
					case "httpguard":
						// An invalid token is absent from the context
						// (fence.FromContext), so no header is sent and the
						// middleware answers 400 invalid-token.
						assert.ErrorIs(t, err, fence.ErrInvalidToken, "%s token %d", gu.name, tok)
					default:
						assert.ErrorIs(t, err, fence.ErrInvalidToken, "%s token %d", gu.name, tok)
					}
				})
			}
			assert.False(t, called, "write was called for bad input")
			assert.Equal(t, before, gu.snapshot(t), "bad input changed the store")
		})
	}
}

// TestNilWriteIsRefused: a nil write function is refused with an error,
// without a panic and without touching the store, by every guard that takes
// one.
func TestNilWriteIsRefused(t *testing.T) {
	ctx := testCtx(t)
	for _, gu := range guards(t) {
		if gu.name == "httpguard" {
			continue // the client side takes no write function
		}
		t.Run(gu.name, func(t *testing.T) {
			before := gu.snapshot(t)
			var err error
			notPanics(t, gu.name+" nil write", func() { err = gu.g.Fence(ctx, "keep", 9, nil) })
			assert.Error(t, err)
			assert.False(t, errors.Is(err, fence.ErrStale), "nil write reported as stale: %v", err)
			assert.Equal(t, before, gu.snapshot(t), "nil write changed the store")
		})
	}
}

// TestBadConfigs: every constructor refuses bad configuration with its
// package's typed error and does no I/O.
func TestBadConfigs(t *testing.T) {
	_, err := pgguard.New(pgguard.Config{Schema: "x;y"})
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = pgguard.New(pgguard.Config{IsoLevel: "read uncommitted"})
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = pgguard.New(pgguard.Config{LockTimeout: 1})
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = s3guard.New(s3guard.Config{})
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = s3guard.New(s3guard.Config{Client: minioclient.New(&minio.Client{}), Bucket: "b", DataPrefix: "no-slash"})
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = s3guard.New(s3guard.Config{Client: minioclient.New(&minio.Client{}), Bucket: "b", MaxAttempts: -1})
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = httpguard.Middleware(nil, httpguard.Config{})
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
	mem, _ := memguard.New(memguard.Config{})
	for _, cfg := range []httpguard.Config{
		{TokenHeader: "Bad Header"}, {ResourceHeader: "X:Y"}, {TokenHeader: "A", ResourceHeader: "a"},
		{RetryAfter: -1}, {MaxResponseBytes: -1},
	} {
		_, err = httpguard.Middleware(mem, cfg)
		assert.ErrorIs(t, err, fence.ErrInvalidConfig, "%+v", cfg)
	}
}
