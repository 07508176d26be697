package chaos

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// proxy is a TCP proxy between the executions and one service (PostgreSQL
// or MinIO) that can cut, stall and slow the connections through it. It is
// deliberately small: a real network fault is a cut (RST), a blackhole
// (packets held until the path heals) or latency, and those are the three
// things it does.
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	open    chan struct{} // closed while traffic flows; replaced while held
	latency time.Duration
	closed  bool
	wg      sync.WaitGroup
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, open: open}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port clients connect to.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) handle(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		_ = client.Close()
		return
	}
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pump(server, client); done <- struct{}{} }()
	go func() { p.pump(client, server); done <- struct{}{} }()
	<-done
	// One direction ended: end both, like a dead TCP path.
	_ = client.Close()
	_ = server.Close()
	<-done
}

func (p *proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open, lat := p.open, p.latency
			p.mu.Unlock()
			<-open // held while blackholed; Cut or Close unblocks via the conns
			if lat > 0 {
				time.Sleep(lat) // the injected latency itself
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

// Cut closes every connection through the proxy (the clients see a reset or
// EOF). New connections are accepted normally.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Hold stops forwarding bytes in both directions until Restore: a
// blackhole. Nothing is lost; held bytes flow on Restore unless a side gave
// up and closed first.
func (p *proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// SetLatency delays every forwarded chunk by d (0 removes the delay).
func (p *proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Restore ends Hold and removes latency.
func (p *proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = 0
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close stops the proxy and closes every connection through it.
func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Restore()
	p.Cut()
	p.wg.Wait()
}
