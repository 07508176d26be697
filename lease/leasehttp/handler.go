package leasehttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
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
	DefaultPace           = 100 * time.Millisecond
)

// PaceBurst is how many event frames a stream may send at once before Pace
// spaces them (see Config.Pace).
const PaceBurst = 4

// streamSendBuffer is the socket send buffer (SO_SNDBUF) of a stream's own
// connection: small, so that what a client has not read waits here, where
// it is coalesced, rather than in the kernel (whose autotuned buffer held
// megabytes of stale events).
const streamSendBuffer = 4096

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
	// is dropped (default 10s). On an HTTP/1.x stream the connection's own
	// send buffer is small (see Handler), so a write waits as soon as the
	// client's receive window is full, not after megabytes.
	WriteTimeout time.Duration
	// Pace spaces a stream's event frames: up to PaceBurst frames go out at
	// once, then one per Pace (default 100ms, so at most 10 a second). While
	// a frame waits for its turn, events that arrive meanwhile are kept
	// (still sent one by one when they fit in the burst) or, when more than
	// PaceBurst are waiting, replaced by one "current" event carrying the
	// latest state ("dropped": true). Pacing delays an event by at most
	// PaceBurst × Pace.
	Pace time.Duration
	// RetryAfter is sent with 503 (default 5s, whole seconds).
	RetryAfter time.Duration
	// Reconnect is the "retry:" delay sent to EventSource clients
	// (default 1s).
	Reconnect time.Duration
	// Watch options for every stream (lease.WithWatchPoll).
	Watch []lease.Option
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
		return nil, configErr("Manager", "nil", nil)
	}
	for name, d := range map[string]time.Duration{"Heartbeat": cfg.Heartbeat, "WriteTimeout": cfg.WriteTimeout,
		"RetryAfter": cfg.RetryAfter, "Reconnect": cfg.Reconnect, "Pace": cfg.Pace} {
		if d < 0 {
			return nil, configErr(name, fmt.Sprintf("negative (%v)", d), nil)
		}
	}
	if cfg.MaxSubscribers < 0 {
		return nil, configErr("MaxSubscribers", fmt.Sprintf("negative (%d)", cfg.MaxSubscribers), nil)
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
	if cfg.Pace == 0 {
		cfg.Pace = DefaultPace
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

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	out, done := h.open(ctx, cancel, w, r)
	defer done()
	if !h.send(ctx, out, key, fmt.Sprintf("retry: %d\n\n", h.cfg.Reconnect.Milliseconds())) {
		return
	}
	h.stream(ctx, out, watch, key, last, resumed)
}

// sink is where a stream's frames go: its own connection (HTTP/1.x,
// hijacked) or the ResponseWriter.
type sink interface {
	// write sends s within timeout, all of it or an error.
	write(s string, timeout time.Duration) error
}

// connSink writes to a hijacked connection.
type connSink struct{ c net.Conn }

func (s connSink) write(str string, timeout time.Duration) error {
	_ = s.c.SetWriteDeadline(time.Now().Add(timeout))
	_, err := io.WriteString(s.c, str)
	return err
}

// writerSink writes to the ResponseWriter and flushes.
type writerSink struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s writerSink) write(str string, timeout time.Duration) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(timeout))
	_, err := io.WriteString(s.w, str)
	if err == nil {
		err = s.rc.Flush()
	}
	return err
}

// open starts the response. An HTTP/1.x request's connection is taken over
// (hijacked) so that its send buffer can be made small (streamSendBuffer):
// the kernel then holds at most a few frames the client has not read, and
// the rest waits in the stream, where pacing coalesces it, and a client that
// does not read blocks the next write (dropped after WriteTimeout) once its
// own receive window is full. The response is then delimited by closing the
// connection (Connection: close; EventSource reconnects). A goroutine reads
// the connection to notice the client leaving and cancels ctx then. Other
// requests (HTTP/2), or a ResponseWriter that cannot be hijacked, are
// answered through the ResponseWriter: paced the same way, with whatever
// buffering the server has. done releases what open took.
func (h *Handler) open(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, r *http.Request) (sink, func()) {
	rc := http.NewResponseController(w)
	if r.ProtoMajor == 1 {
		if conn, brw, err := rc.Hijack(); err == nil {
			setSendBuffer(conn)
			hd := w.Header().Clone()
			for _, k := range []string{"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive"} {
				hd.Del(k)
			}
			var head strings.Builder
			proto := "HTTP/1.0"
			if r.ProtoAtLeast(1, 1) {
				proto = "HTTP/1.1"
			}
			head.WriteString(proto + " 200 OK\r\nConnection: close\r\n")
			_ = hd.Write(&head)
			head.WriteString("\r\n")
			_ = conn.SetReadDeadline(time.Time{})
			read := make(chan struct{})
			br := brw.Reader // the writer half is not used
			// Until the client leaves (EOF) or the connection is closed below.
			go func() {
				defer close(read)
				var b [64]byte // a client sends nothing on a stream: no large buffer
				_, _ = br.Discard(br.Buffered())
				for {
					if _, err := conn.Read(b[:]); err != nil {
						cancel()
						return
					}
				}
			}()
			stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
			out := connSink{c: conn}
			if err := out.write(head.String(), h.cfg.WriteTimeout); err != nil {
				cancel()
			}
			return out, func() {
				stop()
				_ = conn.Close()
				<-read
			}
		}
	}
	w.WriteHeader(http.StatusOK)
	return writerSink{w: w, rc: rc}, func() {}
}

// setSendBuffer makes the socket send buffer of c (a TCP connection, or
// TLS over one) small.
func setSendBuffer(c net.Conn) {
	if t, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = t.NetConn()
	}
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.SetWriteBuffer(streamSendBuffer)
	}
}

// errDrained ends a non-blocking read of the Watcher's queue.
var errDrained = errors.New("leasehttp: drained")

// stream sends watch's events to out until ctx ends, the Watcher ends or a
// write fails. Events wait in pend for the pacer; more than PaceBurst
// waiting are replaced by one "current" event of the latest state.
func (h *Handler) stream(ctx context.Context, out sink, watch *lease.Watcher, key lease.Key, last fence.Token, resumed bool) {
	drained, stopDrain := context.WithCancelCause(ctx) // already done: Next only takes what is queued
	stopDrain(errDrained)
	p := pacer{every: h.cfg.Pace, tokens: PaceBurst}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	pend := make([]lease.WatchEvent, 0, PaceBurst+1) // never longer: see coalesce
	// take moves every event the Watcher has queued into pend, without
	// waiting; false when the Watcher has ended.
	take := func() bool {
		for {
			ev, err := watch.Next(drained)
			if err != nil {
				return errors.Is(err, errDrained)
			}
			pend = coalesce(append(pend, ev))
		}
	}
	first := true
	for {
		if len(pend) == 0 {
			nctx, ncancel := context.WithTimeout(ctx, h.cfg.Heartbeat)
			ev, err := watch.Next(nctx)
			ncancel()
			switch {
			case err == nil:
				pend = append(pend, ev)
			case ctx.Err() != nil:
				return
			case errors.Is(err, context.DeadlineExceeded):
				if !h.send(ctx, out, key, ": heartbeat\n\n") {
					return
				}
				continue
			default: // the Watcher or the Manager ended
				return
			}
		}
		if !take() {
			return
		}
		for {
			wait := p.wait(time.Now(), len(pend))
			if wait <= 0 {
				break
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			if !take() {
				return
			}
		}
		for _, ev := range pend {
			var wire string
			if first && resumed {
				data := FromWatch(ev)
				data.Resumed, data.Changed = true, data.Token != int64(last)
				wire = frame(data)
			} else {
				wire = h.encode(ev)
			}
			first = false
			if !h.send(ctx, out, key, wire) {
				return
			}
		}
		p.take(time.Now(), len(pend))
		clear(pend)
		pend = pend[:0]
	}
}

// coalesce keeps pend when it fits in one burst, and otherwise replaces it
// by one WatchCurrent of the latest state, marked Dropped.
func coalesce(pend []lease.WatchEvent) []lease.WatchEvent {
	if len(pend) <= PaceBurst {
		return pend
	}
	cur := lease.WatchEvent{Kind: lease.WatchCurrent, Ownership: pend[len(pend)-1].Ownership, Dropped: true}
	clear(pend)
	return append(pend[:0], cur)
}

// pacer is a token bucket: PaceBurst frames at once, refilled at one per
// every.
type pacer struct {
	every  time.Duration
	tokens float64
	at     time.Time // of the last refill
}

func (p *pacer) refill(now time.Time) {
	if !p.at.IsZero() {
		p.tokens = min(PaceBurst, p.tokens+float64(now.Sub(p.at))/float64(p.every))
	}
	p.at = now
}

// wait is how long until n frames may go (0: now).
func (p *pacer) wait(now time.Time, n int) time.Duration {
	p.refill(now)
	if missing := float64(n) - p.tokens; missing > 0 {
		return time.Duration(missing * float64(p.every))
	}
	return 0
}

// take spends n frames.
func (p *pacer) take(now time.Time, n int) {
	p.refill(now)
	p.tokens -= float64(n)
}

// send writes s within WriteTimeout; false ends the stream. A failed write
// counts as a drop unless the stream was ending anyway (ctx done: the client
// left, or Close).
func (h *Handler) send(ctx context.Context, out sink, key lease.Key, s string) bool {
	if err := out.write(s, h.cfg.WriteTimeout); err != nil {
		if ctx.Err() == nil {
			h.dropped.Add(1)
			h.log.Debug("leasehttp: client dropped", "key", key.String(), "err", err)
		}
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

// configErr is the *fence.ConfigError of a leasehttp Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "leasehttp", Field: field, Reason: reason, Err: err}
}
