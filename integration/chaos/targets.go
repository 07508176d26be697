package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/integration/history"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Guard kinds, as recorded in history.Event.Guard.
const (
	GuardPG   = "pg"
	GuardS3   = "s3"
	GuardHTTP = "http"
)

// DataTable holds the values the PostgreSQL and HTTP targets write, one row
// per resource, next to the guard's marks in the run's schema.
const DataTable = "chaos_data"

// target is one kind of guarded store the executions write to.
type target interface {
	kind() string
	// write stores value at resource under token and classifies the result.
	write(ctx context.Context, resource string, token fence.Token, value string) (history.Outcome, error)
	// read returns the stored value and the token that wrote it.
	read(ctx context.Context, resource string) (value string, token fence.Token, found bool, err error)
}

// classify maps a guard error to an outcome: nil is accepted, a stale
// refusal is stale, a definite "nothing happened" (busy, bad input) is
// failed, anything else (a network error, a lost commit reply) may have
// committed and is unknown.
func classify(err error) history.Outcome {
	switch {
	case err == nil:
		return history.Accepted
	case errors.Is(err, fence.ErrStale):
		return history.Stale
	case errors.Is(err, fence.ErrBusy), errors.Is(err, fence.ErrInvalidToken), errors.Is(err, fence.ErrInvalidResource):
		return history.Failed
	default:
		return history.Unknown
	}
}

// CreateDataTable creates DataTable in schema (which must already hold the
// guard marks table).
func CreateDataTable(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+q+`.`+DataTable+` (
		resource text PRIMARY KEY, token bigint NOT NULL, value text NOT NULL)`)
	return err
}

func dataUpsert(schema string) string {
	return `INSERT INTO "` + schema + `".` + DataTable + ` (resource, token, value) VALUES ($1, $2, $3)
		ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value`
}

func readData(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema, resource string) (string, fence.Token, bool, error) {
	var v string
	var t int64
	err := db.QueryRow(ctx, `SELECT value, token FROM "`+schema+`".`+DataTable+` WHERE resource = $1`, resource).Scan(&v, &t)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	return v, fence.Token(t), true, nil
}

// pgTarget writes a row of DataTable inside pgguard.Fence's transaction.
type pgTarget struct {
	g      *pgguard.Guard
	pool   *pgxpool.Pool
	schema string
	upsert string
}

func newPGTarget(pool *pgxpool.Pool, schema string) (*pgTarget, error) {
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema, LockTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	return &pgTarget{g: g, pool: pool, schema: schema, upsert: dataUpsert(schema)}, nil
}

func (t *pgTarget) kind() string { return GuardPG }

func (t *pgTarget) write(ctx context.Context, resource string, token fence.Token, value string) (history.Outcome, error) {
	err := t.g.Fence(ctx, resource, token, func(ctx context.Context) error {
		tx, ok := pgguard.TxFromContext(ctx)
		if !ok {
			return errors.New("chaos: no transaction in the write context")
		}
		_, err := tx.Exec(ctx, t.upsert, resource, int64(token), value)
		return err
	})
	return classify(err), err
}

func (t *pgTarget) read(ctx context.Context, resource string) (string, fence.Token, bool, error) {
	return readData(ctx, t.pool, t.schema, resource)
}

// s3Target writes through s3guard.
type s3Target struct{ s *s3guard.Guard }

func (t *s3Target) kind() string { return GuardS3 }

func (t *s3Target) write(ctx context.Context, resource string, token fence.Token, value string) (history.Outcome, error) {
	_, err := t.s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, token)), resource, []byte(value), s3guard.PutOptions{ContentType: "text/plain"})
	return classify(err), err
}

func (t *s3Target) read(ctx context.Context, resource string) (string, fence.Token, bool, error) {
	b, info, err := t.s.GetBytes(ctx, resource)
	if errors.Is(err, fence.ErrNotFound) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	return string(b), info.Token, true, nil
}

// httpTarget posts the value to a service fenced by httpguard over a
// pgguard.Guard; the handler writes DataTable in the guard's transaction.
type httpTarget struct {
	client *http.Client
	url    string
	pool   *pgxpool.Pool // for reading back the final state
	schema string
}

func (t *httpTarget) kind() string { return GuardHTTP }

func (t *httpTarget) write(ctx context.Context, resource string, token fence.Token, value string) (history.Outcome, error) {
	ctx = httpguard.WithResource(fence.WithToken(ctx, token), resource)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, t.url, strings.NewReader(value))
	if err != nil {
		return history.Failed, err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return history.Unknown, err
	}
	defer resp.Body.Close()
	err = httpguard.ErrorFromResponse(resp)
	_, _ = io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusNoContent {
		err = fmt.Errorf("chaos: http status %d", resp.StatusCode)
		return history.Unknown, err
	}
	return classify(err), err
}

func (t *httpTarget) read(ctx context.Context, resource string) (string, fence.Token, bool, error) {
	return readData(ctx, t.pool, t.schema, resource)
}

// NewHTTPService returns the handler of the fenced HTTP service the HTTP
// target writes to: httpguard middleware over a pgguard.Guard on pool, and
// a handler that stores the request body in DataTable.
func NewHTTPService(pool *pgxpool.Pool, schema string) (http.Handler, error) {
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema, LockTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	mw, err := httpguard.Middleware(g, httpguard.Config{})
	if err != nil {
		return nil, err
	}
	upsert := dataUpsert(schema)
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := pgguard.TxFromContext(r.Context())
		tok, tokOK := fence.FromContext(r.Context())
		res, resOK := httpguard.ResourceFromContext(r.Context())
		if !ok || !tokOK || !resOK {
			http.Error(w, "not fenced", http.StatusInternalServerError)
			return
		}
		var body bytes.Buffer
		if _, err := io.Copy(&body, io.LimitReader(r.Body, 1<<16)); err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if _, err := tx.Exec(r.Context(), upsert, res, int64(tok), body.String()); err != nil {
			http.Error(w, "write failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})), nil
}

// minioClient is the client type s3guard takes.
type minioClient = *minio.Client

func newS3Target(mc *minio.Client, bucket string) (*s3Target, error) {
	s, err := s3guard.New(s3guard.Config{Client: minioclient.New(mc), Bucket: bucket})
	if err != nil {
		return nil, err
	}
	return &s3Target{s: s}, nil
}
