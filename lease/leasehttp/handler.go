package leasehttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// Defaults applied by New.
const (
	DefaultMaxSubscribers = 10000
	DefaultHeartbeat      = 15 * time.Second
	DefaultWriteTimeout   = 10 * time.Second
	DefaultRetryAfter     = 5 * time.Second
	DefaultReconnect      = time.Second
)

// ErrInvalidConfig is matched by New's errors.
var ErrInvalidConfig = errors.New("leasehttp: invalid config")

// Config configures a Handler. Zero fields take the documented defaults.
type Config struct {
	// Manager watches the keys (required). Its Authorizer decides who may
	// watch which key, with the request's context.
	Manager *lease.Manager
	// Key reads the watched key from a request. Default: the query
	// parameters "account" and "session". An error is answered 400.
	Key func(r *http.Request) (lease.Key, error)
	// MaxSubscribers bounds the streams open at once (default 10000).
	MaxSubscribers int
	// Heartbeat is the idle interval after which a comment line is sent
	// (default 15s).
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a client; a client slower than that
	// is dropped (default 10s).
	WriteTimeout time.Duration
	// RetryAfter is sent with 503 (default 5s, whole seconds).
	RetryAfter time.Duration
	// Reconnect is the "retry:" delay sent to EventSource clients
	// (default 1s).
	Reconnect time.Duration
	// Watch options for every stream (lease.WithWatchPoll).
	Watch []lease.WatchOption
	// Logger receives drops and errors at Debug/Warn. Nil discards.
	Logger *slog.Logger
}

// Event is the JSON data of one stream event.
type Event struct {
	Kind        string     `json:"kind"`  // current, granted, renewed, taken-over, released, expired
	State       string     `json:"state"` // not-found, held, expired, released
	Token       int64      `json:"token"`
	RunID       string     `json:"run_id,omitempty"`
	Holder      string     `json:"holder,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"` // database time
	RemainingMS int64      `json:"remaining_ms"`         // ExpiresAt − database now, when held
	Displaced   string     `json:"displaced_run_id,omitempty"`
	// Dropped marks a "current" event that replaces events the stream
	// missed; Resumed marks the first event after a reconnect with a valid
	// Last-Event-ID, and Changed whether the token differs from it.
	Dropped bool `json:"dropped,omitempty"`
	Resumed bool `json:"resumed,omitempty"`
	Changed bool `json:"changed,omitempty"`
}

// FromWatch converts a lease.WatchEvent.
func FromWatch(e lease.WatchEvent) Event {
	out := Event{Kind: e.Kind.String(), State: e.State.String(), Token: int64(e.Token), Holder: e.Holder, Dropped: e.Dropped}
	if e.State != lease.StateNotFound {
		out.RunID = e.RunID.String()
		t := e.ExpiresAt
		out.ExpiresAt = &t
	}
	if e.Held() {
		out.RemainingMS = e.Remaining.Milliseconds()
	}
	if e.Kind == lease.WatchTakenOver {
		out.Displaced = e.Displaced.String()
	}
	return out
}

// Handler serves lease ownership streams. Close it before the Manager.
type Handler struct {
	cfg     Config
	log     *slog.Logger
	root    context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	closed  bool
	subs    atomic.Int64
	dropped atomic.Int64
	last    atomic.Pointer[encoded] // the last event encoded: streams of one key share it
}

// encoded is one event's wire form.
type encoded struct {
	ev   lease.WatchEvent
	wire string
}

// encode renders ev, reusing the last rendering when every stream of a key
// is sent the same event.
func (h *Handler) encode(ev lease.WatchEvent) string {
	if c := h.last.Load(); c != nil && c.ev == ev {
		return c.wire
	}
	wire := frame(FromWatch(ev))
	h.last.Store(&encoded{ev: ev, wire: wire})
	return wire
}

func frame(e Event) string {
	b, _ := json.Marshal(e)
	return fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", e.Token, e.Kind, b)
}

// New validates cfg and fills defaults.
func New(cfg Config) (*Handler, error) {
	if cfg.Manager == nil {
		return nil, fmt.Errorf("%w: Manager is nil", ErrInvalidConfig)
	}
	for name, d := range map[string]time.Duration{"Heartbeat": cfg.Heartbeat, "WriteTimeout": cfg.WriteTimeout,
		"RetryAfter": cfg.RetryAfter, "Reconnect": cfg.Reconnect} {
		if d < 0 {
			return nil, fmt.Errorf("%w: %s is negative (%v)", ErrInvalidConfig, name, d)
		}
	}
	if cfg.MaxSubscribers < 0 {
		return nil, fmt.Errorf("%w: MaxSubscribers is negative (%d)", ErrInvalidConfig, cfg.MaxSubscribers)
	}
	if cfg.Key == nil {
		cfg.Key = QueryKey
	}
	if cfg.MaxSubscribers == 0 {
		cfg.MaxSubscribers = DefaultMaxSubscribers
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Reconnect == 0 {
		cfg.Reconnect = DefaultReconnect
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	root, stop := context.WithCancel(context.Background())
	return &Handler{cfg: cfg, log: log, root: root, stop: stop}, nil
}

// QueryKey reads the key from the query parameters "account" and "session".
func QueryKey(r *http.Request) (lease.Key, error) {
	q := r.URL.Query()
	k := lease.Key{AccountID: q.Get("account"), SessionID: q.Get("session")}
	return k, k.Validate()
}

// Subscribers is the number of streams open now.
func (h *Handler) Subscribers() int { return int(h.subs.Load()) }

// Dropped is the number of streams ended because a write to the client
// failed or timed out.
func (h *Handler) Dropped() int64 { return h.dropped.Load() }

// Close ends every stream, waits for them to return and refuses new ones.
// Idempotent.
func (h *Handler) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.stop()
	h.wg.Wait()
}

func (h *Handler) unavailable(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", strconv.Itoa(int((h.cfg.RetryAfter+time.Second-1)/time.Second)))
	http.Error(w, why, http.StatusServiceUnavailable)
}

// enter reserves a stream slot; false when closed or full.
func (h *Handler) enter() (ok bool, full bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false, false
	}
	if h.subs.Add(1) > int64(h.cfg.MaxSubscribers) {
		h.subs.Add(-1)
		return false, true
	}
	h.wg.Add(1)
	return true, false
}

func (h *Handler) leave() {
	h.subs.Add(-1)
	h.wg.Done()
}

// ServeHTTP streams the request's key.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	key, err := h.cfg.Key(r)
	if err == nil {
		err = key.Validate()
	}
	if err != nil {
		http.Error(w, "bad key: "+err.Error(), http.StatusBadRequest)
		return
	}
	ok, full := h.enter()
	if !ok {
		if full {
			h.unavailable(w, "too many subscribers")
		} else {
			h.unavailable(w, "shutting down")
		}
		return
	}
	defer h.leave()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(h.root, cancel)() //nolint:contextcheck // Close ends the request's stream; the stream still derives from r.Context()

	watch, err := h.cfg.Manager.Watch(ctx, key, h.cfg.Watch...)
	switch {
	case errors.Is(err, lease.ErrUnauthorized):
		w.WriteHeader(http.StatusForbidden) // no body: nothing about the key
		return
	case errors.Is(err, lease.ErrInvalidKey):
		http.Error(w, "bad key: "+err.Error(), http.StatusBadRequest)
		return
	case errors.Is(err, lease.ErrClosed):
		h.unavailable(w, "shutting down")
		return
	case err != nil:
		h.log.Warn("leasehttp: watch failed", "key", key.String(), "err", err)
		http.Error(w, "watch failed", http.StatusInternalServerError)
		return
	}
	defer watch.Close()
	last, resumed := lastEventID(r)

	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if !h.write(w, rc, key, fmt.Sprintf("retry: %d\n\n", h.cfg.Reconnect.Milliseconds())) {
		return
	}
	first := true
	for {
		nctx, ncancel := context.WithTimeout(ctx, h.cfg.Heartbeat)
		ev, err := watch.Next(nctx)
		ncancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			if !h.write(w, rc, key, ": heartbeat\n\n") {
				return
			}
			continue
		default: // the Watcher or the Manager ended
			return
		}
		var wire string
		if first && resumed {
			data := FromWatch(ev)
			data.Resumed, data.Changed = true, data.Token != int64(last)
			wire = frame(data)
		} else {
			wire = h.encode(ev)
		}
		first = false
		if !h.write(w, rc, key, wire) {
			return
		}
	}
}

// write sends s and flushes it within WriteTimeout; false drops the stream.
func (h *Handler) write(w http.ResponseWriter, rc *http.ResponseController, key lease.Key, s string) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
	_, err := io.WriteString(w, s)
	if err == nil {
		err = rc.Flush()
	}
	if err != nil {
		h.dropped.Add(1)
		h.log.Debug("leasehttp: client dropped", "key", key.String(), "err", err)
		return false
	}
	return true
}

// lastEventID reads Last-Event-ID as a token; anything else counts as none.
func lastEventID(r *http.Request) (fence.Token, bool) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		return 0, false
	}
	t, err := fence.Parse(v)
	if err != nil {
		return 0, false
	}
	return t, true
}
