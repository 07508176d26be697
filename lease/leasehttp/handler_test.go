package leasehttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leasehttp"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of net/http's default transport.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

type fixture struct {
	t      testing.TB
	schema string
	mgr    *lease.Manager // serves the streams
	other  *lease.Manager // acts on the keys
	h      *leasehttp.Handler
	srv    *httptest.Server
}

// deny is the fixture's Authorizer rule: sessions named "secret-…" are
// refused.
func deny(_ context.Context, k lease.Key) error {
	if strings.HasPrefix(k.SessionID, "secret-") {
		return errors.New("not a member")
	}
	return nil
}

func newFixture(t testing.TB, cfg leasehttp.Config, wrap func(net.Listener) net.Listener) *fixture {
	t.Helper()
	f := &fixture{t: t, schema: fencetest.Schema(t, migrations.Lease)}
	var err error
	f.mgr, err = lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: f.schema, TTL: 2 * time.Second,
		Authorizer: lease.AuthorizerFunc(deny)})
	require.NoError(t, err)
	f.other, err = lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: f.schema, TTL: 2 * time.Second})
	require.NoError(t, err)
	cfg.Manager = f.mgr
	if cfg.Watch == nil {
		cfg.Watch = []lease.Option{lease.WithWatchPoll(50 * time.Millisecond)}
	}
	f.h, err = leasehttp.New(cfg)
	require.NoError(t, err)
	f.srv = httptest.NewUnstartedServer(f.h)
	if wrap != nil {
		f.srv.Listener = wrap(f.srv.Listener)
	}
	f.srv.Start()
	t.Cleanup(func() {
		f.h.Close()
		f.srv.Close()
		_ = f.other.Close()
		_ = f.mgr.Close()
	})
	return f
}

func (f *fixture) url(k lease.Key) string {
	return f.srv.URL + "/?" + url.Values{"account": {k.AccountID}, "session": {k.SessionID}}.Encode()
}

func key() lease.Key {
	return lease.Key{AccountID: "acme", SessionID: "conv-" + uuid.NewString()[:8]}
}

// stream is one client's open event stream.
type stream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

type sse struct {
	id, event string
	data      leasehttp.Event
}

func (f *fixture) open(k lease.Key, lastID string) *stream {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.url(k), nil)
	require.NoError(f.t, err)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	require.Equal(f.t, http.StatusOK, resp.StatusCode)
	require.Equal(f.t, "text/event-stream", resp.Header.Get("Content-Type"))
	f.t.Cleanup(func() { _ = resp.Body.Close() })
	return &stream{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next reads the next event (skipping retry and heartbeat lines).
func (s *stream) next(t testing.TB) sse {
	t.Helper()
	var ev sse
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if ev.event != "" {
				return ev
			}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			require.NoError(t, json.Unmarshal([]byte(line[6:]), &ev.data))
		}
	}
	t.Fatalf("stream ended: %v", s.sc.Err())
	return ev
}

// TestStreamFollowsOwnershipAndResumes: current, granted, taken-over and
// released arrive with the token as id; a reconnect with Last-Event-ID gets
// the current state at once, a garbage Last-Event-ID is treated as none.
func TestStreamFollowsOwnershipAndResumes(t *testing.T) {
	f := newFixture(t, leasehttp.Config{}, nil)
	k := key()
	s := f.open(k, "")
	first := s.next(t)
	require.Equal(t, "current", first.event)
	require.Equal(t, "not-found", first.data.State)

	la, err := f.other.Acquire(context.Background(), k, lease.WithHolder("desktop"))
	require.NoError(t, err)
	g := s.next(t)
	require.Equal(t, "granted", g.event)
	require.Equal(t, fmt.Sprint(la.Token()), g.id)
	require.Equal(t, "desktop", g.data.Holder)
	require.Equal(t, la.RunID().String(), g.data.RunID)
	require.Positive(t, g.data.RemainingMS)

	lb, err := f.other.Takeover(context.Background(), k, lease.WithHolder("browser"))
	require.NoError(t, err)
	var to sse
	for to = s.next(t); to.event == "renewed"; to = s.next(t) {
	}
	require.Equal(t, "taken-over", to.event)
	require.Equal(t, fmt.Sprint(lb.Token()), to.id)
	require.Equal(t, la.RunID().String(), to.data.Displaced)

	// A reconnect (network cut) with the last id it saw.
	r := f.open(k, g.id)
	cur := r.next(t)
	require.Equal(t, "current", cur.event)
	require.Equal(t, fmt.Sprint(lb.Token()), cur.id, "the current owner at once")
	require.Equal(t, "browser", cur.data.Holder)
	require.True(t, cur.data.Resumed)
	require.True(t, cur.data.Changed, "the owner changed since its last id")

	for _, garbage := range []string{"abc", "-1", "1e9", strings.Repeat("9", 40)} {
		gs := f.open(k, garbage)
		ev := gs.next(t)
		require.Equal(t, "current", ev.event)
		require.False(t, ev.data.Resumed, "Last-Event-ID %q is treated as none", garbage)
		require.Equal(t, fmt.Sprint(lb.Token()), ev.id)
	}

	_, err = lb.Release(context.Background())
	require.NoError(t, err)
	for _, st := range []*stream{s, r} {
		var rel sse
		for rel = st.next(t); rel.event == "renewed"; rel = st.next(t) {
		}
		require.Equal(t, "released", rel.event)
		require.Equal(t, fmt.Sprint(lb.Token()), rel.id)
	}
}

// TestBadRequests: malformed keys 400, unauthorized 403 with no body and
// nothing subscribed, other methods 405.
func TestBadRequests(t *testing.T) {
	f := newFixture(t, leasehttp.Config{}, nil)
	get := func(u string) (*http.Response, string) {
		resp, err := http.Get(u)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	for _, q := range []string{"", "?account=acme", "?session=s", "?account=acme&session=a%00b", "?account=acme&session=" + strings.Repeat("x", 300)} {
		resp, _ := get(f.srv.URL + "/" + q)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
	}
	resp, body := get(f.url(lease.Key{AccountID: "acme", SessionID: "secret-1"}))
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Empty(t, body, "nothing is sent to an unauthorized client")
	require.Empty(t, resp.Header.Get("Content-Type"))
	require.Zero(t, f.h.Subscribers())

	resp, err := http.Post(f.url(key()), "text/plain", nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	_, err = leasehttp.New(leasehttp.Config{})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = leasehttp.New(leasehttp.Config{Manager: f.mgr, Heartbeat: -time.Second})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
}

// TestSubscriberCap: over MaxSubscribers, 503 with Retry-After; a slot
// freed is usable again.
func TestSubscriberCap(t *testing.T) {
	f := newFixture(t, leasehttp.Config{MaxSubscribers: 2, RetryAfter: 3 * time.Second}, nil)
	k := key()
	a, b := f.open(k, ""), f.open(k, "")
	a.next(t)
	b.next(t)
	resp, err := http.Get(f.url(k))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "3", resp.Header.Get("Retry-After"))

	require.NoError(t, a.resp.Body.Close())
	deadline := time.Now().Add(10 * time.Second)
	for f.h.Subscribers() > 1 {
		require.True(t, time.Now().Before(deadline), "the closed stream leaves")
		time.Sleep(5 * time.Millisecond)
	}
	f.open(k, "").next(t)
}

// rawStream is a client on a plain TCP connection with default socket
// buffers: it sends the request and reads the response through read.
func (f *fixture) rawStream(k lease.Key) net.Conn {
	f.t.Helper()
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "GET /?account=%s&session=%s HTTP/1.1\r\nHost: x\r\n\r\n", k.AccountID, k.SessionID)
	require.NoError(f.t, err)
	return conn
}

// TestNonReadingClientDroppedWithDefaultBuffers: a client that sends its
// request and never reads, with the kernel's default socket buffers on both
// sides, is dropped once its own receive window is full and a write has
// waited WriteTimeout — after a few hundred events, not after the
// megabytes an autotuned server send buffer absorbs — while another stream
// keeps getting every event.
func TestNonReadingClientDroppedWithDefaultBuffers(t *testing.T) {
	f := newFixture(t, leasehttp.Config{Heartbeat: time.Millisecond, WriteTimeout: 100 * time.Millisecond, Pace: time.Millisecond}, nil)
	k := key()
	f.rawStream(k) // never read

	fast := f.open(k, "")
	require.Equal(t, "current", fast.next(t).event)
	taker, err := lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: f.schema})
	require.NoError(t, err)
	defer taker.Close()
	// Grants keep coming while the silent stream fills up; the fast one
	// sees each of them (or, when they come faster than its pace, the
	// latest state).
	// How many it takes depends on the socket buffers and on how many
	// heartbeats (1 ms) the machine's load let through meanwhile, so the
	// bound is a time, not a count.
	n := 0
	giveUp := time.Now().Add(time.Minute)
	for ; f.h.Dropped() == 0; n++ {
		require.True(t, time.Now().Before(giveUp), "the non-reading client was not dropped within a minute (%d takeovers)", n)
		l, err := taker.Takeover(context.Background(), k)
		require.NoError(t, err)
		var ev sse
		for ev = fast.next(t); ev.id != fmt.Sprint(l.Token()); ev = fast.next(t) {
		}
		require.Contains(t, []string{"granted", "taken-over", "current"}, ev.event)
	}
	t.Logf("dropped after %d takeovers", n)
	require.EqualValues(t, 1, f.h.Dropped())
	deadline := time.Now().Add(10 * time.Second)
	for f.h.Subscribers() != 1 {
		require.True(t, time.Now().Before(deadline), "the dropped stream leaves, the fast one stays")
		time.Sleep(5 * time.Millisecond)
	}
}

// slowConn reads at most 256 bytes per Read and then pauses 40ms: a client
// that keeps reading, at about 6 KB/s.
type slowConn struct{ net.Conn }

func (c slowConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p[:min(len(p), 256)])
	time.Sleep(40 * time.Millisecond)
	return n, err
}

// TestSlowReaderGetsLatestState: a client that reads, but slower than a
// takeover storm produces events, gets the latest state soon after the
// storm, with the events it could not keep up with replaced by a "current"
// event marked dropped — not every stale event at its own pace, seconds
// behind the truth.
func TestSlowReaderGetsLatestState(t *testing.T) {
	f := newFixture(t, leasehttp.Config{}, nil)
	k := key()
	conn := f.rawStream(k)
	type got struct {
		token   int64
		dropped bool
	}
	events := make(chan got, 1<<14)
	go func() {
		defer close(events)
		resp, err := http.ReadResponse(bufio.NewReader(slowConn{conn}), nil)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			var e leasehttp.Event
			if json.Unmarshal([]byte(line[6:]), &e) == nil {
				events <- got{token: e.Token, dropped: e.Dropped}
			}
		}
	}()
	first, ok := <-events
	require.True(t, ok, "the stream ended")
	require.Zero(t, first.token, "the key is free at first")

	var latest fence.Token
	for range 300 {
		l, err := f.other.Takeover(context.Background(), k)
		require.NoError(t, err)
		latest = l.Token()
	}
	end := time.Now()
	const bound = 3 * time.Second
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	dropped, frames := false, 0
	for {
		select {
		case e, ok := <-events:
			require.True(t, ok, "the stream ended")
			frames++
			dropped = dropped || e.dropped
			if e.token < int64(latest) {
				continue
			}
			t.Logf("latest state read %v after the storm, %d frames", time.Since(end).Round(time.Millisecond), frames)
			require.True(t, dropped, "the stale events were replaced by the latest state")
			return
		case <-deadline.C:
			t.Fatalf("%v after the storm the slow reader had read %d frames and not yet token %d", bound, frames, latest)
		}
	}
}

// TestHTTP2StreamIsServed: over HTTP/2, where the connection cannot be
// taken over, the stream goes through the ResponseWriter, paced the same
// way.
func TestHTTP2StreamIsServed(t *testing.T) {
	f := &fixture{t: t, schema: fencetest.Schema(t, migrations.Lease)}
	var err error
	f.mgr, err = lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: f.schema, TTL: 2 * time.Second})
	require.NoError(t, err)
	f.other, err = lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: f.schema, TTL: 2 * time.Second})
	require.NoError(t, err)
	f.h, err = leasehttp.New(leasehttp.Config{Manager: f.mgr, Watch: []lease.Option{lease.WithWatchPoll(50 * time.Millisecond)}})
	require.NoError(t, err)
	f.srv = httptest.NewUnstartedServer(f.h)
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	client := f.srv.Client()
	t.Cleanup(func() {
		client.CloseIdleConnections()
		f.h.Close()
		f.srv.Close()
		_ = f.other.Close()
		_ = f.mgr.Close()
	})
	k := key()
	resp, err := client.Get(f.url(k))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 2, resp.ProtoMajor)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	s := &stream{resp: resp, sc: bufio.NewScanner(resp.Body)}
	require.Equal(t, "current", s.next(t).event)
	var l *lease.Lease
	for range 20 {
		l, err = f.other.Takeover(context.Background(), k)
		require.NoError(t, err)
	}
	var ev sse
	for ev = s.next(t); ev.id != fmt.Sprint(l.Token()); ev = s.next(t) {
	}
	require.Contains(t, []string{"granted", "taken-over", "current"}, ev.event)
	require.Equal(t, l.RunID().String(), ev.data.RunID)
}

// TestCloseEndsStreams: Close ends open streams and refuses new ones.
func TestCloseEndsStreams(t *testing.T) {
	f := newFixture(t, leasehttp.Config{}, nil)
	k := key()
	s := f.open(k, "")
	s.next(t)
	f.h.Close()
	for s.sc.Scan() {
	}
	require.Zero(t, f.h.Subscribers())
	resp, err := http.Get(f.url(k))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}
