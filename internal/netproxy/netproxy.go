// Package netproxy is a TCP proxy for tests that need a network fault between
// a client and a real server (PostgreSQL, MinIO, an HTTP service).
//
// A Proxy listens on 127.0.0.1 (a free port) and forwards every accepted
// connection to a fixed target address. While it runs, a test can inject the
// faults that real networks produce:
//
//   - Cut closes every live connection (both halves) and refuses new ones
//     until Restore: the client sees a connection reset or EOF at once. This is
//     a crashed server or a firewall sending RST.
//   - Pause (and Blackhole, which pauses both directions) keeps connections
//     open but stops forwarding bytes in the chosen directions, and new
//     connections are accepted but paused too. Requests hang and no error ever
//     comes back: the partition that only timeouts can detect. Pausing only
//     Downstream lets requests reach the server but loses their replies,
//     which is how a "committed, but the reply was lost" case is made.
//     Bytes read while paused are held, not dropped, and are delivered in
//     order after Restore — as TCP would after a partition heals.
//   - OnHold registers a function told each time bytes are held because
//     their direction is paused: with Downstream paused, the moment the
//     server's reply to a request has reached the proxy (so the server has
//     processed the request) while the client still waits for it. A test
//     can then end the client's context with the request applied and its
//     reply in flight — the "outcome unknown" case.
//   - SetLatency delays every chunk forwarded in a direction.
//   - Restore undoes Cut and Pause.
//
// Close stops the listener, closes every connection and waits for every
// goroutine of the proxy to return. A Proxy never dials anything but its
// target, which tests must keep on the loopback interface.
package netproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Direction selects which half of the forwarded connections a fault applies to.
type Direction uint8

const (
	// Upstream is client → target (requests).
	Upstream Direction = 1 << iota
	// Downstream is target → client (replies).
	Downstream
	// Both is Upstream|Downstream.
	Both = Upstream | Downstream
)

// ErrClosed is returned by operations on a closed Proxy.
var ErrClosed = errors.New("netproxy: closed")

// Proxy forwards TCP connections from Addr to a target and injects faults.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu       sync.Mutex
	cond     *sync.Cond // broadcast on any state change
	closed   bool
	cut      bool
	paused   Direction
	latency  [2]time.Duration // [0] upstream, [1] downstream
	onHold   func(Direction)
	conns    map[*pair]struct{}
	accepted int

	wg sync.WaitGroup
}

type pair struct {
	client, server net.Conn
	once           sync.Once
}

func (p *pair) close() {
	p.once.Do(func() {
		_ = p.client.Close()
		_ = p.server.Close()
	})
}

// New starts a proxy on 127.0.0.1 with a free port that forwards to target
// (host:port). The caller must Close it.
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("netproxy: bad target %q: %w", target, err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*pair]struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Host and Port split Addr, for clients configured by host and port.
func (p *Proxy) Host() string { h, _, _ := net.SplitHostPort(p.Addr()); return h }

// Port is the listening port as a number.
func (p *Proxy) Port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// Target is the address connections are forwarded to.
func (p *Proxy) Target() string { return p.target }

// Cut closes every live connection and refuses (accepts and immediately
// closes) new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.snapshotLocked()
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Blackhole stops forwarding in both directions; connections stay open.
// It is Pause(Both).
func (p *Proxy) Blackhole() { p.Pause(Both) }

// Pause stops forwarding bytes in the given directions (added to any already
// paused). Connections stay open and new ones are accepted, paused as well.
func (p *Proxy) Pause(d Direction) {
	p.mu.Lock()
	p.paused |= d & Both
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Restore ends Cut and Pause: new connections are forwarded again and held
// bytes flow.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.paused = 0
	p.cond.Broadcast()
	p.mu.Unlock()
}

// OnHold sets f (nil removes it) to be called each time a chunk of bytes
// read in a paused direction is held, with that direction. f runs on the
// proxy's forwarding goroutine of that connection before the chunk waits;
// it must not block, and may call the Proxy's methods (Restore, say).
func (p *Proxy) OnHold(f func(dir Direction)) {
	p.mu.Lock()
	p.onHold = f
	p.mu.Unlock()
}

// SetLatency delays each chunk forwarded in the given directions by d (0 to
// remove the delay).
func (p *Proxy) SetLatency(dir Direction, d time.Duration) {
	p.mu.Lock()
	if dir&Upstream != 0 {
		p.latency[0] = d
	}
	if dir&Downstream != 0 {
		p.latency[1] = d
	}
	p.mu.Unlock()
}

// Live is the number of open forwarded connections.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted is the number of connections forwarded since New (refused ones
// during Cut are not counted).
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// CloseConns closes every live connection without refusing new ones.
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	conns := p.snapshotLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Close stops accepting, closes every connection and waits for all of the
// proxy's goroutines to return. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	conns := p.snapshotLocked()
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) snapshotLocked() []*pair {
	out := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	return out
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.connect(c)
	}
}

func (p *Proxy) connect(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second}
	server, err := d.DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	pr := &pair{client: client, server: server}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		pr.close()
		return
	}
	p.conns[pr] = struct{}{}
	p.accepted++
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pipe(pr, client, server, Upstream)
	go p.pipe(pr, server, client, Downstream)
}

// gate blocks while dir is paused; it reports false when the pair should stop
// (proxy closed or cut).
func (p *Proxy) gate(dir Direction, pr *pair) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed || p.cut {
			return 0, false
		}
		if _, live := p.conns[pr]; !live {
			return 0, false
		}
		if p.paused&dir == 0 {
			idx := 0
			if dir == Downstream {
				idx = 1
			}
			return p.latency[idx], true
		}
		p.cond.Wait()
	}
}

// noteHold calls the OnHold function when dir is paused now.
func (p *Proxy) noteHold(dir Direction) {
	p.mu.Lock()
	f := p.onHold
	held := p.paused&dir != 0 && !p.closed && !p.cut
	p.mu.Unlock()
	if held && f != nil {
		f(dir)
	}
}

func (p *Proxy) pipe(pr *pair, src, dst net.Conn, dir Direction) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		if _, ok := p.conns[pr]; ok {
			delete(p.conns, pr)
			p.cond.Broadcast() // wake the other half if it is paused
		}
		p.mu.Unlock()
		pr.close()
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.noteHold(dir)
			lat, ok := p.gate(dir, pr)
			if !ok {
				return
			}
			if lat > 0 {
				time.Sleep(lat)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or closed: tear the pair down
			return
		}
	}
}
