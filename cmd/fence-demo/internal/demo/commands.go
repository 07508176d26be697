package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// DefaultCLITTL is the lease TTL of the subcommands: long enough to type the
// next command in another terminal.
const DefaultCLITTL = 30 * time.Second

// S3Key and PGResource name the report a session's runs write, in the
// scenario and in the put subcommand: the session's own resources
// (lease.Key.Resource), encoding the key unambiguously: sessions ("a/b", "c") and ("a", "b/c") get different
// names, and no id can produce a "." or ".." segment.
func S3Key(k lease.Key) string { return k.Resource("report.txt") }

// PGResource is the pgguard resource of a session's report row.
func PGResource(k lease.Key) string { return k.Resource("report") }

// checkNames validates every name derived from k before anything is written,
// so that a key whose report names are unusable is a usage error with
// nothing changed, never a failure halfway through a write.
func checkNames(k lease.Key) error {
	for _, n := range []string{S3Key(k), PGResource(k)} {
		if err := fence.ValidateResource(n); err != nil {
			return usagef("session %s: report name: %v", k, err)
		}
	}
	for seg := range strings.SplitSeq(S3Key(k), "/") {
		if len(seg) > s3guard.MaxSegmentLen {
			return usagef("session %s: report key has a path segment of %d bytes, limit %d", k, len(seg), s3guard.MaxSegmentLen)
		}
	}
	return nil
}

// common holds the flags every subcommand shares.
type common struct {
	conn    Conn
	account string
	session string
	json    bool
	ttl     time.Duration
	hasTTL  bool // the command takes --ttl: zero or negative is then an error, not "default"
}

func (c *common) register(fs *flagSet, env Env, ttl bool) {
	c.conn.register(fs.FlagSet, env.Getenv)
	fs.StringVar(&c.account, "account", DefaultAccount, "account id of the session")
	fs.StringVar(&c.session, "session", "", "session id (required)")
	fs.BoolVar(&c.json, "json", false, "print the result as one JSON object")
	if ttl {
		c.hasTTL = true
		fs.DurationVar(&c.ttl, "ttl", DefaultCLITTL, "lease TTL set by acquire and renew")
	}
}

func (c *common) key() (lease.Key, error) {
	if c.session == "" {
		return lease.Key{}, usagef("--session is required")
	}
	k := lease.Key{AccountID: c.account, SessionID: c.session}
	if err := k.Validate(); err != nil {
		return k, usagef("%v", err)
	}
	if err := checkNames(k); err != nil {
		return k, err
	}
	if err := c.conn.validate(); err != nil {
		return k, err
	}
	if c.hasTTL && (c.ttl < lease.MinTTL || c.ttl > lease.MaxTTL) {
		return k, usagef("--ttl %v: want %v to %v", c.ttl, lease.MinTTL, lease.MaxTTL)
	}
	return k, nil
}

// keyAndRunID validates the key flags and a --run-id value (renew, release).
func (c *common) keyAndRunID(runID string) (lease.Key, uuid.UUID, error) {
	k, err := c.key()
	if err != nil {
		return lease.Key{}, uuid.Nil, err
	}
	id, err := parseRunID(runID)
	return k, id, err
}

// parseRunID accepts only the canonical form acquire prints (36 characters,
// 8-4-4-4-12 hex digits); uuid.Parse alone also takes braces, "urn:uuid:"
// and 38-character strings with arbitrary outer characters.
func parseRunID(s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.Nil, usagef("--run-id is required (acquire prints it)")
	}
	id, err := uuid.Parse(s)
	if err != nil || id == uuid.Nil || len(s) != 36 || id.String() != strings.ToLower(s) {
		return uuid.Nil, usagef("--run-id %q: not a run id (want the UUID acquire printed)", s)
	}
	return id, nil
}

// session is an opened connection for one subcommand.
type session struct {
	pool *pgxpool.Pool
	mgr  *lease.Manager
}

func (c *common) open(ctx context.Context, withLease bool) (*session, error) {
	pool, err := openPool(ctx, c.conn.DatabaseURL, "")
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: c.conn.Schema}, migrations.Lease, migrations.Guard); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate schema %s: %w", c.conn.Schema, err)
	}
	s := &session{pool: pool}
	if withLease {
		ttl := c.ttl
		if ttl == 0 {
			ttl = DefaultCLITTL
		}
		if s.mgr, err = lease.New(lease.Config{Pool: pool, Schema: c.conn.Schema, TTL: ttl}); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return s, nil
}

// close releases nothing: the pool is closed before the Manager, so a lease
// acquired by this process is left to its TTL (or to renew/release from
// another process) instead of being released by Manager.Close. The lease
// package has no call to detach a held lease; this is the workaround.
func (s *session) close() {
	s.pool.Close()
	if s.mgr != nil {
		_ = s.mgr.Close() // its release fails on the closed pool, by design
	}
}

// output prints ordered key=value lines, or one JSON object.
type output struct {
	keys []string
	vals map[string]any
}

func (o *output) add(k string, v any) *output {
	if o.vals == nil {
		o.vals = map[string]any{}
	}
	o.keys = append(o.keys, k)
	o.vals[k] = v
	return o
}

func (o *output) print(w io.Writer, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(o.vals)
		fmt.Fprintln(w, string(b))
		return
	}
	for _, k := range o.keys {
		fmt.Fprintf(w, "%s=%v\n", k, o.vals[k])
	}
}

func stateOutput(st lease.Ownership) *output {
	o := (&output{}).add("status", st.State.String())
	if st.State != lease.StateNotFound {
		o.add("run_id", st.RunID.String()).add("token", int64(st.Token)).
			add("acquired_at", st.AcquiredAt.Format(time.RFC3339Nano)).
			add("expires_at", st.ExpiresAt.Format(time.RFC3339Nano))
	}
	if st.Held() {
		o.add("remaining", st.Remaining.Round(time.Millisecond).String())
	}
	return o
}

func acquireCmd(ctx context.Context, env Env, args []string) error {
	fs := newFlags(env, lookup("acquire"), `
Acquires the lease of (--account, --session) if it is free, prints its run_id
and fencing token, and exits WITHOUT releasing: the lease lasts --ttl unless
renewed ("fence-demo renew") or released ("fence-demo release"). A lease held
by another run is refused with its holder (exit 3).`)
	var c common
	c.register(fs, env, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	k, err := c.key()
	if err != nil {
		return err
	}
	s, err := c.open(ctx, true)
	if err != nil {
		return err
	}
	defer s.close() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
	l, err := s.mgr.Acquire(ctx, k)
	var held *lease.HeldError
	if errors.As(err, &held) {
		(&output{}).add("status", "held").add("holder_run_id", held.RunID.String()).add("holder_token", int64(held.Token)).
			add("remaining", held.Remaining.Round(time.Millisecond).String()).print(env.Stdout, c.json)
		return err
	}
	if err != nil {
		return err
	}
	(&output{}).add("run_id", l.RunID().String()).add("token", int64(l.Token())).
		add("expires_at", l.ExpiresAt().Format(time.RFC3339Nano)).add("ttl", c.ttl.String()).print(env.Stdout, c.json)
	return nil
}

func renewCmd(ctx context.Context, env Env, args []string) error {
	fs := newFlags(env, lookup("renew"), `
Renews the lease of (--account, --session) for run --run-id by another --ttl.
Refused (exit 3) when that run no longer holds an unexpired lease: a late
renewal never revives an expired lease.`)
	var c common
	c.register(fs, env, true)
	runID := fs.String("run-id", "", "the run_id acquire printed (required)")
	if err := parse(fs, args); err != nil {
		return err
	}
	k, id, err := c.keyAndRunID(*runID)
	if err != nil {
		return err
	}
	s, err := c.open(ctx, true)
	if err != nil {
		return err
	}
	defer s.close() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
	r, err := s.mgr.Renew(ctx, k, id)
	if err != nil {
		if errors.Is(err, lease.ErrLost) {
			st, ierr := s.mgr.Inspect(ctx, k)
			if ierr == nil {
				stateOutput(st).print(env.Stdout, c.json)
			}
		}
		return err
	}
	(&output{}).add("run_id", id.String()).add("token", int64(r.Token)).
		add("expires_at", r.ExpiresAt.Format(time.RFC3339Nano)).print(env.Stdout, c.json)
	return nil
}

func releaseCmd(ctx context.Context, env Env, args []string) error {
	fs := newFlags(env, lookup("release"), `
Releases the lease of (--account, --session) for run --run-id. Prints the
result: released, already-released (exit 0), or expired, not-holder,
not-found (exit 3: this run did not hold the lease; nothing changed).`)
	var c common
	c.register(fs, env, false)
	runID := fs.String("run-id", "", "the run_id acquire printed (required)")
	if err := parse(fs, args); err != nil {
		return err
	}
	k, id, err := c.keyAndRunID(*runID)
	if err != nil {
		return err
	}
	s, err := c.open(ctx, true)
	if err != nil {
		return err
	}
	defer s.close() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
	res, err := s.mgr.Release(ctx, k, id)
	if err != nil {
		return err
	}
	(&output{}).add("result", res.String()).print(env.Stdout, c.json)
	switch res {
	case lease.ReleaseDone, lease.ReleaseAlreadyDone:
		return nil
	}
	return fmt.Errorf("%w: release %s: %s", ErrNotHolder, k, res)
}

func inspectCmd(ctx context.Context, env Env, args []string) error {
	fs := newFlags(env, lookup("inspect"), `
Asks the server who owns (--account, --session): status (not-found, held,
expired, released), the last run_id and token, times on the database clock.
Also prints the high-water marks of the session's report in PostgreSQL and
MinIO.`)
	var c common
	c.register(fs, env, false)
	if err := parse(fs, args); err != nil {
		return err
	}
	k, err := c.key()
	if err != nil {
		return err
	}
	s, err := c.open(ctx, true)
	if err != nil {
		return err
	}
	defer s.close() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
	st, err := s.mgr.Inspect(ctx, k)
	if err != nil {
		return err
	}
	o := stateOutput(st)
	g, err := pgguard.New(pgguard.Config{DB: s.pool, Schema: c.conn.Schema})
	if err != nil {
		return err
	}
	pm, err := g.Mark(ctx, PGResource(k))
	if err != nil {
		return err
	}
	o.add("pg_mark", int64(pm.Token))
	if store, err := c.store(ctx); err == nil {
		if sm, err := store.Mark(ctx, S3Key(k)); err == nil {
			o.add("s3_mark", int64(sm.Token))
		} else {
			o.add("s3_mark_error", err.Error())
		}
	} else {
		o.add("s3_mark_error", err.Error())
	}
	o.print(env.Stdout, c.json)
	return nil
}

func (c *common) store(ctx context.Context) (*s3guard.Guard, error) {
	cl, err := newMinIO(c.conn, c.conn.MinIOEndpoint)
	if err != nil {
		return nil, err
	}
	ok, err := cl.BucketExists(ctx, c.conn.Bucket)
	if err != nil {
		return nil, &ServiceError{Service: "MinIO", Addr: c.conn.MinIOEndpoint, Err: err}
	}
	if !ok {
		if err := cl.MakeBucket(ctx, c.conn.Bucket, minioMakeOpts); err != nil {
			return nil, &ServiceError{Service: "MinIO", Addr: c.conn.MinIOEndpoint, Err: err}
		}
	}
	return s3guard.New(s3guard.Config{Client: minioclient.New(cl), Bucket: c.conn.Bucket})
}

func putCmd(ctx context.Context, env Env, args []string) error {
	fs := newFlags(env, lookup("put"), `
A guarded write of the session's report with fencing token --token: the
object reports/<account>/<session>.txt (each id path-escaped) in MinIO (s3guard) and/or a row in
the demo_reports table fenced by pgguard.FenceTx in the same transaction.
The guards do not consult the lease: a token below the highest one a
resource has accepted is refused (exit 3), printing both numbers.`)
	var c common
	c.register(fs, env, false)
	tokS := fs.String("token", "", "fencing token to present (required; acquire prints one)")
	where := fs.String("store", "both", "where to write: s3, pg or both")
	body := fs.String("body", "", "report text (default: a line naming the token)")
	if err := parse(fs, args); err != nil {
		return err
	}
	k, err := c.key()
	if err != nil {
		return err
	}
	if *tokS == "" {
		return usagef("--token is required")
	}
	tok, err := fence.Parse(*tokS)
	if err != nil {
		return usagef("--token: %v", err)
	}
	doS3, doPG := *where == "s3" || *where == "both", *where == "pg" || *where == "both"
	if !doS3 && !doPG {
		return usagef("--store %q: want s3, pg or both", *where)
	}
	text := *body
	if text == "" {
		text = fmt.Sprintf("report for %s written by hand with token %d\n", k, tok)
	}
	var errs []error
	o := &output{}
	if doS3 {
		store, err := c.store(ctx)
		if err != nil {
			return err
		}
		info, err := store.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), S3Key(k), []byte(text), s3guard.PutOptions{ContentType: "text/plain",
			Metadata: map[string]string{"writer": string(ActorCLI)}})
		errs = append(errs, putResult(o, "s3", int64(info.Token), err))
	}
	if doPG {
		s, err := c.open(ctx, false)
		if err != nil {
			return err
		}
		defer s.close() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
		if err := ensureTable(ctx, s.pool, c.conn.Schema); err != nil {
			return err
		}
		g, err := pgguard.New(pgguard.Config{DB: s.pool, Schema: c.conn.Schema})
		if err != nil {
			return err
		}
		q, _ := migrations.QuoteIdentifier(c.conn.Schema)
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := g.FenceTx(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), tx, PGResource(k)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+q+`.`+ReportsTable+` (resource, token, run_id, writer, body) VALUES ($1, $2, $3, $4, $5)`,
				PGResource(k), int64(tok), uuid.Nil, string(ActorCLI), text)
			return err
		})
		errs = append(errs, putResult(o, "pg", int64(tok), err))
	}
	o.print(env.Stdout, c.json)
	return errors.Join(errs...)
}

func putResult(o *output, store string, mark int64, err error) error {
	if se, ok := fence.IsStale(err); ok {
		o.add(store, "stale").add(store+"_presented", int64(se.Presented)).add(store+"_highest", int64(se.Highest))
		return fmt.Errorf("%s: %w", store, err)
	}
	if err != nil {
		o.add(store, "error").add(store+"_error", err.Error())
		return fmt.Errorf("%s: %w", store, err)
	}
	o.add(store, "accepted").add(store+"_mark", strconv.FormatInt(mark, 10))
	return nil
}
