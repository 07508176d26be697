package chaos

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errReplyLost is what a caller sees when the chaos harness swallowed the
// reply of a request the server did process.
var errReplyLost = errors.New("chaos: reply lost (injected)")

type dropKey struct{}

// withDroppedReply marks ctx so that the next HTTP exchange made with it
// (through dropTransport) reaches the server but its reply is discarded.
func withDroppedReply(ctx context.Context) (context.Context, *atomic.Bool) {
	armed := new(atomic.Bool)
	armed.Store(true)
	return context.WithValue(ctx, dropKey{}, armed), armed
}

// dropTransport sends every request; when the request's context was armed
// with withDroppedReply, it reads and discards the server's full reply and
// returns errReplyLost instead, once.
type dropTransport struct{ base http.RoundTripper }

func (t dropTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	armed, _ := req.Context().Value(dropKey{}).(*atomic.Bool)
	if err != nil || armed == nil || !armed.CompareAndSwap(true, false) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, errReplyLost
}

// commitDropper wraps the connections of one pgx pool. When armed, the next
// COMMIT written on any of them is sent in full and the connection is then
// closed before the server's reply can be read: the transaction commits (the
// server has the whole message) but the client sees a connection error.
//
// It can also stall its connections (hold/resume): while held, nothing this
// pool writes leaves the process, which is how an in-process pause freezes
// the lease's own renewals as a real process pause would.
type commitDropper struct {
	armed atomic.Bool

	mu   sync.Mutex
	gate chan struct{} // nil: open; else closed on resume
}

// hold stalls every write on the pool's connections until resume.
func (d *commitDropper) hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gate == nil {
		d.gate = make(chan struct{})
	}
}

// resume ends hold.
func (d *commitDropper) resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
}

// gateNow returns the hold gate, nil when open.
func (d *commitDropper) gateNow() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gate
}

func (d *commitDropper) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, d: d, closed: make(chan struct{}), dlMoved: make(chan struct{}, 1)}, nil
}

// dropConn is one connection of a commitDropper's pool. While the pool is
// held, Write waits like a write into a blackhole: until resume, until the
// connection's write deadline (pgx moves it to interrupt a cancelled
// query), or until Close.
type dropConn struct {
	net.Conn
	d *commitDropper

	mu        sync.Mutex
	deadline  time.Time
	dlMoved   chan struct{} // 1-slot: the write deadline changed
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *dropConn) SetDeadline(t time.Time) error {
	c.setWriteDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *dropConn) SetWriteDeadline(t time.Time) error {
	c.setWriteDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *dropConn) setWriteDeadline(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	select {
	case c.dlMoved <- struct{}{}:
	default:
	}
}

func (c *dropConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// wait blocks while the pool is held; it fails when the write deadline
// passes or the connection is closed first.
func (c *dropConn) wait() error {
	for {
		g := c.d.gateNow()
		if g == nil {
			return nil
		}
		c.mu.Lock()
		dl := c.deadline
		c.mu.Unlock()
		var expire <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			expire = t.C
		}
		select {
		case <-g:
			return nil
		case <-c.closed:
			return net.ErrClosed
		case <-expire:
			return os.ErrDeadlineExceeded
		case <-c.dlMoved:
		}
	}
}

// pgx sends COMMIT as a simple Query message: 'Q', int32 length, "commit\x00".
var commitMsg = []byte("commit\x00")

func (c *dropConn) Write(p []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	if c.d.armed.Load() && len(p) > 0 && p[0] == 'Q' && bytes.Contains(bytes.ToLower(p), commitMsg) &&
		c.d.armed.CompareAndSwap(true, false) {
		n, err := c.Conn.Write(p)
		if err == nil {
			// Half-close: the server reads the whole COMMIT and then EOF; it
			// commits, and its reply has nowhere to go.
			if tc, ok := c.Conn.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			_ = c.Close()
			return n, nil
		}
		return n, err
	}
	return c.Conn.Write(p)
}
