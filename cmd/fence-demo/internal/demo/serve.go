package demo

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leasehttp"
	"github.com/fencekit/fencekit/sql/migrations"
)

//go:embed web
var webFiles embed.FS

// Devices a conversation can be open on in serve mode.
var serveDevices = map[string]Actor{"desktop": ActorA, "browser": ActorB}

// server is `fence-demo serve`: the two-devices story in two browser tabs.
type server struct {
	key     func(session string) lease.Key
	mgr     *lease.Manager
	sess    *session
	store   *s3guard.Guard
	guard   *pgguard.Guard
	table   string
	stall   time.Duration
	stream  *leasehttp.Handler
	mu      sync.Mutex
	leases  map[[2]string]*lease.Lease // (session, device) → its lease
	streams map[*openStream]struct{}
	cuts    map[string]chan struct{} // device → closed when its cut is lifted
}

func serveCmd(ctx context.Context, env Env, args []string) error {
	fs := newFlags(env, lookup("serve"), `Serves the two-devices story as a web page: open the printed address, then
the conversation as "desktop" and as "browser" in two tabs. Each tab follows
who owns the run from a Server-Sent Events stream (lease.Manager.Watch through
lease/leasehttp); the owner runs tool calls that write through pgguard and
s3guard; the other tab is read-only and can "continue here" (Manager.Takeover).
"Run with stalled network" holds the write for --stall before it reaches the
stores, with the claim it had when it was sent: after a takeover and a write by
the new owner it comes back refused as stale.`)
	var cm common
	cm.register(fs, env, true)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (port 0: any free port; the address is printed)")
	stall := fs.Duration("stall", 3*time.Second, "how long a stalled tool call is held before it reaches the stores")
	if err := parse(fs, args); err != nil {
		return err
	}
	cm.session = "probe" // validates the account and the connection flags
	if _, err := cm.key(); err != nil {
		return err
	}
	if *stall < 0 || *stall > time.Minute {
		return usagef("--stall %v: want 0 to 1m", *stall)
	}
	sess, err := cm.open(ctx, false)
	if err != nil {
		return err
	}
	defer sess.pool.Close()
	if err := ensureTable(ctx, sess.pool, cm.conn.Schema); err != nil {
		return err
	}
	st, err := cm.store(ctx)
	if err != nil {
		return err
	}
	mgr, err := lease.New(lease.Config{Pool: sess.pool, Schema: cm.conn.Schema, TTL: cm.ttl,
		Authorizer: lease.AuthorizerFunc(func(_ context.Context, k lease.Key) error {
			if k.AccountID != cm.account {
				return &NotMemberError{User: User, Account: k.AccountID}
			}
			return nil
		})})
	if err != nil {
		return err
	}
	defer mgr.Close() //nolint:contextcheck // shutdown: Close bounds its own release
	guard, err := pgguard.New(pgguard.Config{DB: sess.pool, Schema: cm.conn.Schema})
	if err != nil {
		return err
	}
	stream, err := leasehttp.New(leasehttp.Config{Manager: mgr, Heartbeat: 5 * time.Second,
		Watch: []lease.Option{lease.WithWatchPoll(250 * time.Millisecond)}})
	if err != nil {
		return err
	}
	q, _ := migrations.QuoteIdentifier(cm.conn.Schema)
	s := &server{mgr: mgr, sess: sess, store: st, guard: guard, table: q + "." + ReportsTable, stall: *stall, stream: stream,
		leases: map[[2]string]*lease.Lease{}, streams: map[*openStream]struct{}{}, cuts: map[string]chan struct{}{},
		key: func(session string) lease.Key { return lease.Key{AccountID: cm.account, SessionID: session} }}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		return usagef("--addr %s: %v", *addr, err)
	}
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(env.Stdout, "fence-demo serve: listening on http://%s/ (account %q, TTL %v)\n", ln.Addr(), cm.account, cm.ttl)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		stream.Close()
		return err
	case <-ctx.Done():
	}
	stream.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(webFiles, "web")
	mux.Handle("GET /", http.FileServerFS(sub))
	mux.Handle("GET /api/stream", http.HandlerFunc(s.serveStream))
	mux.HandleFunc("POST /api/open", s.grant(false))
	mux.HandleFunc("POST /api/takeover", s.grant(true))
	mux.HandleFunc("POST /api/write", s.write)
	mux.HandleFunc("POST /api/cut", s.cut)
	return mux
}

// serveStream is the leasehttp stream. A device's streams can be cut, as a
// network cut would (/api/cut): open ones end, and new ones hang until the
// cut is lifted, when the EventSource's reconnect (with Last-Event-ID) goes
// through.
func (s *server) serveStream(w http.ResponseWriter, r *http.Request) {
	dev := r.URL.Query().Get("device")
	s.mu.Lock()
	blocked := s.cuts[dev]
	s.mu.Unlock()
	if blocked != nil {
		select {
		case <-blocked:
		case <-r.Context().Done():
			return
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	c := &openStream{dev: dev, cancel: cancel}
	s.mu.Lock()
	s.streams[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, c)
		s.mu.Unlock()
	}()
	s.stream.ServeHTTP(w, r.WithContext(ctx))
}

// openStream is one open event stream of a device.
type openStream struct {
	dev    string
	cancel context.CancelFunc
}

// cut starts (on=1) or lifts (on=0) a network cut of one device's streams.
func (s *server) cut(w http.ResponseWriter, r *http.Request) {
	dev, on := r.URL.Query().Get("device"), r.URL.Query().Get("on") == "1"
	if _, ok := serveDevices[dev]; !ok {
		reply(w, http.StatusBadRequest, map[string]any{"error": "device must be desktop or browser"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	if on {
		if s.cuts[dev] == nil {
			s.cuts[dev] = make(chan struct{})
		}
		for c := range s.streams {
			if c.dev == dev {
				c.cancel()
				n++
			}
		}
	} else if ch := s.cuts[dev]; ch != nil {
		close(ch)
		delete(s.cuts, dev)
	}
	reply(w, http.StatusOK, map[string]any{"cut": on, "dropped": n})
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// params reads and validates ?session=…&device=….
func (s *server) params(w http.ResponseWriter, r *http.Request) (lease.Key, string, bool) {
	dev := r.URL.Query().Get("device")
	if _, ok := serveDevices[dev]; !ok {
		reply(w, http.StatusBadRequest, map[string]any{"error": "device must be desktop or browser"})
		return lease.Key{}, "", false
	}
	k := s.key(r.URL.Query().Get("session"))
	if err := k.Validate(); err != nil {
		reply(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return lease.Key{}, "", false
	}
	if err := checkNames(k); err != nil {
		reply(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return lease.Key{}, "", false
	}
	return k, dev, true
}

// grant is "start here" (Acquire) or "continue here" (Takeover) for a device.
func (s *server) grant(takeover bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k, dev, ok := s.params(w, r)
		if !ok {
			return
		}
		var l *lease.Lease
		var err error
		if takeover {
			l, err = s.mgr.Takeover(r.Context(), k, lease.WithHolder(dev))
		} else {
			l, err = s.mgr.Acquire(r.Context(), k, lease.WithHolder(dev))
		}
		var held *lease.HeldError
		switch {
		case errors.As(err, &held):
			reply(w, http.StatusConflict, map[string]any{"error": err.Error(), "holder": held.Holder, "token": int64(held.Token)})
			return
		case errors.Is(err, lease.ErrUnauthorized):
			reply(w, http.StatusForbidden, map[string]any{"error": "unauthorized"})
			return
		case err != nil:
			reply(w, http.StatusInternalServerError, map[string]any{"error": err.Error()})
			return
		}
		s.mu.Lock()
		s.leases[[2]string{k.SessionID, dev}] = l
		s.mu.Unlock()
		reply(w, http.StatusOK, map[string]any{"token": int64(l.Token()), "run_id": l.RunID().String(), "holder": dev})
	}
}

// write is the tool call of a device: the story's report, written through
// both guards with the claim of the device's lease. A stalled call keeps
// that claim but not the lease's cancellation (a request already on the
// wire) and reaches the stores after --stall.
func (s *server) write(w http.ResponseWriter, r *http.Request) {
	k, dev, ok := s.params(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	l := s.leases[[2]string{k.SessionID, dev}]
	s.mu.Unlock()
	if l == nil {
		reply(w, http.StatusConflict, map[string]any{"error": "this device holds no lease for the conversation"})
		return
	}
	work, stop := underLease(r.Context(), l)
	defer stop()
	stalled := r.URL.Query().Get("stall") == "1"
	if stalled {
		work = context.WithoutCancel(work)
		t := time.NewTimer(s.stall)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	rep := report{object: S3Key(k), resource: PGResource(k), table: s.table}
	c, _ := fence.ClaimFromContext(work)
	body := fmt.Sprintf("report for %s written by %s run %s with token %d\n", k, dev, c.Run, c.Token)
	_, serr := rep.putObject(work, s.store, body, map[string]string{"writer": dev, "run_id": c.Run})
	perr := rep.insertRow(work, s.guard, serveDevices[dev], body)
	reply(w, http.StatusOK, map[string]any{"token": int64(c.Token), "stalled": stalled, "s3": outcome(serr), "pg": outcome(perr)})
}

// underLease is the request's context for a tool call under l: it keeps
// ctx's values and cancellation, carries l's claim, and ends with l's cause
// (lease.ErrTakenOver, ErrTrustExpired, ...) as soon as l's context does.
// stop releases it.
func underLease(ctx context.Context, l *lease.Lease) (context.Context, context.CancelFunc) {
	lc := l.Context()
	c, _ := fence.ClaimFromContext(lc)
	work, cancel := context.WithCancelCause(fence.WithClaim(ctx, c))
	unhook := context.AfterFunc(lc, func() { cancel(context.Cause(lc)) })
	return work, func() {
		unhook()
		cancel(context.Canceled)
	}
}

// outcome describes a guarded write's answer for the page.
func outcome(err error) map[string]any {
	if err == nil {
		return map[string]any{"ok": true, "text": "accepted"}
	}
	if se, ok := fence.IsStale(err); ok {
		return map[string]any{"ok": false, "refused": true, "text": fmt.Sprintf("refused: stale token %d, resource has accepted %d", se.Presented, se.Highest)}
	}
	for _, cause := range []error{lease.ErrTakenOver, lease.ErrLost, lease.ErrTrustExpired} {
		if errors.Is(err, cause) {
			return map[string]any{"ok": false, "refused": true, "text": "refused: " + cause.Error()}
		}
	}
	return map[string]any{"ok": false, "text": "failed: " + err.Error()}
}
