package httpguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/sql/migrations"
)

// pgService is a side-effecting service: it writes the request body as a
// row through the transaction pgguard opened, so the row and the mark
// commit together. "X-Fail: <status>" writes the row and then answers that
// status, which must roll the row back.
type pgService struct {
	schema string
	guard  *pgguard.Guard
	reader interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}
}

func newPGService(t *testing.T) *pgService {
	schema := fencetest.Schema(t, migrations.Guard)
	admin := fencetest.Pool(t)
	_, err := admin.Exec(bg(), fmt.Sprintf(`CREATE TABLE %q.docs (resource text PRIMARY KEY, body text NOT NULL, token bigint NOT NULL)`, schema))
	require.NoError(t, err)
	g, err := pgguard.New(pgguard.Config{DB: fencetest.Pool(t), Schema: schema})
	require.NoError(t, err)
	return &pgService{schema: schema, guard: g, reader: fencetest.Pool(t)}
}

func (s *pgService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tx, ok := pgguard.TxFromContext(r.Context())
	tok, ok2 := fence.FromContext(r.Context())
	res, ok3 := httpguard.ResourceFromContext(r.Context())
	if !ok || !ok2 || !ok3 {
		http.Error(w, "missing tx/token/resource in context", http.StatusInternalServerError)
		return
	}
	body, _ := io.ReadAll(r.Body)
	_, err := tx.Exec(r.Context(), fmt.Sprintf(`INSERT INTO %q.docs (resource, body, token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET body = EXCLUDED.body, token = EXCLUDED.token`, s.schema), res, string(body), int64(tok))
	if err != nil {
		http.Error(w, "write failed", http.StatusInternalServerError)
		return
	}
	if st := r.Header.Get("X-Fail"); st != "" {
		code, _ := strconv.Atoi(st)
		w.WriteHeader(code)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *pgService) read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	var v string
	var tok int64
	err := s.reader.QueryRow(ctx, fmt.Sprintf(`SELECT body, token FROM %q.docs WHERE resource = $1`, s.schema), r).Scan(&v, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	return v, fence.Token(tok), err == nil, err
}

func TestConformancePgguard(t *testing.T) {
	svc := newPGService(t)
	s := newKitSubject(t, svc.guard, svc, svc.read)
	guardtest.Run(t, guardtest.Config{New: func(*testing.T) guardtest.Subject { return s }})
}

// A handler error rolls back the row it wrote and the mark; a stale request
// never runs the handler.
func TestPgguardHandlerErrorRollsBack(t *testing.T) {
	svc := newPGService(t)
	srv, client := server(t, mustMiddleware(t, svc.guard, httpguard.Config{})(svc))
	s := &httpSubject{url: srv.URL, client: client, read: svc.read}
	require.NoError(t, s.Write(bg(), "doc", 4, "four"))

	resp := get(t, client, srv.URL, fenced(9, "doc"), map[string][]string{"X-Fail": {"422"}})
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	v, tok, found, err := svc.read(bg(), "doc")
	require.NoError(t, err)
	assert.Equal(t, []any{"four", fence.Token(4), true}, []any{v, tok, found})
	m, err := svc.guard.Mark(bg(), "doc")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(4), m.Token)

	err = s.Write(bg(), "doc", 3, "three")
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.Token(4), se.Highest)
	v, _, _, err = svc.read(bg(), "doc")
	require.NoError(t, err)
	assert.Equal(t, "four", v)
}
