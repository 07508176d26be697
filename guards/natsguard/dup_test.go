package natsguard

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

var (
	_ guardtest.DuplicateWriter = kitSubject{}
	_ guardtest.DuplicateWriter = fenceKitSubject{}
)

// pubHold is a NATS-aware TCP proxy that withholds the first PUB or HPUB
// frame a client sends to one subject, as a network that delays that
// packet would, and forwards every other frame (the client's re-sends of
// the same message included) in order. The held frame can be delivered
// to the server later, on a connection of its own.
type pubHold struct {
	ln      net.Listener
	target  string
	subject string

	mu    sync.Mutex
	held  []byte // the held frame: control line and payload
	conns []net.Conn
	wg    sync.WaitGroup
}

func newPubHold(target, subject string) (*pubHold, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &pubHold{ln: ln, target: target, subject: subject}
	h.wg.Add(1)
	go h.accept()
	return h, nil
}

func (h *pubHold) addr() string { return h.ln.Addr().String() }

func (h *pubHold) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", h.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		h.mu.Lock()
		h.conns = append(h.conns, c, s)
		h.mu.Unlock()
		h.wg.Add(2)
		go func() { defer h.wg.Done(); _, _ = io.Copy(c, s); _ = c.Close() }()
		go func() { defer h.wg.Done(); h.upstream(c, s); _ = s.Close() }()
	}
}

// upstream forwards the client's frames to the server, holding the first
// one published to h.subject.
func (h *pubHold) upstream(c, s net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		frame := line
		f := strings.Fields(string(line))
		if len(f) >= 3 && (strings.EqualFold(f[0], "PUB") || strings.EqualFold(f[0], "HPUB")) {
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			body := make([]byte, n+2) // payload and its CRLF
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			frame = append(append([]byte{}, line...), body...)
			if f[1] == h.subject {
				h.mu.Lock()
				hold := h.held == nil
				if hold {
					h.held = frame
				}
				h.mu.Unlock()
				if hold {
					continue
				}
			}
		}
		if _, err := s.Write(frame); err != nil {
			return
		}
	}
}

// deliver sends the held frame to the server on a connection of its own,
// as the message it is (subject, reply subject, headers, payload), and
// waits for the server's reply to it.
func (h *pubHold) deliver(ctx context.Context) error {
	h.mu.Lock()
	frame := h.held
	h.mu.Unlock()
	if frame == nil {
		return fmt.Errorf("no publish to the held subject was sent: %w", guardtest.ErrNothingHeld)
	}
	m, err := parseHPUB(frame)
	if err != nil {
		return err
	}
	nc, err := nats.Connect("nats://" + h.target)
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(m.Reply)
	if err != nil {
		return err
	}
	if err := nc.PublishMsg(m); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sub.NextMsgWithContext(ctx); err != nil {
		return fmt.Errorf("no reply to the held copy: %w", err)
	}
	return nil
}

func (h *pubHold) close() {
	_ = h.ln.Close()
	h.mu.Lock()
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// parseHPUB reads "HPUB subject reply hdrlen total\r\n" + headers +
// payload + "\r\n" into a message, headers unchanged.
func parseHPUB(frame []byte) (*nats.Msg, error) {
	i := bytes.Index(frame, []byte("\r\n"))
	f := strings.Fields(string(frame[:i]))
	if len(f) != 5 || !strings.EqualFold(f[0], "HPUB") {
		return nil, fmt.Errorf("held frame %q: want HPUB subject reply hdrlen total", frame[:i])
	}
	hl, err := strconv.Atoi(f[3])
	if err != nil {
		return nil, err
	}
	rest := frame[i+2 : len(frame)-2]
	hdr, data := string(rest[:hl]), rest[hl:]
	m := &nats.Msg{Subject: f[1], Reply: f[2], Header: nats.Header{}, Data: data}
	lines := strings.Split(strings.TrimSuffix(hdr, "\r\n\r\n"), "\r\n")
	for _, l := range lines[1:] { // lines[0] is "NATS/1.0"
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("held frame: header line %q", l)
		}
		m.Header[k] = append(m.Header[k], strings.TrimSpace(v))
	}
	return m, nil
}

// writeDelayed runs write through a Guard of its own on bucket whose
// connection goes through a pubHold on resource's subject, and returns
// what write returned and the held copy's deliver function (which also
// closes the Guard's connection and the proxy). Each call has its own
// proxy, connection and Guard, so calls may run concurrently.
func writeDelayed(ctx context.Context, bucket, resource string, write func(ctx context.Context, g *Guard) error) (func(context.Context) error, error) {
	h, err := newPubHold(natsURL()[len("nats://"):], "$KV."+bucket+"."+Key(resource))
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect("nats://"+h.addr(), nats.NoReconnect())
	if err != nil {
		h.close()
		return nil, err
	}
	done := func(deliver bool, ctx context.Context) error {
		var err error
		if deliver {
			err = h.deliver(ctx)
		}
		nc.Close()
		h.close()
		return err
	}
	g, err := openGuard(nc, bucket, Config{ReplyTimeout: 300 * time.Millisecond, SettleTimeout: time.Second})
	if err != nil {
		_ = done(false, ctx)
		return nil, err
	}
	werr := write(ctx, g)
	return func(ctx context.Context) error { return done(true, ctx) }, werr
}

// openGuard returns a Guard over bucket on nc.
func openGuard(nc *nats.Conn, bucket string, cfg Config) (*Guard, error) {
	js, err := jetstreamOf(nc)
	if err != nil {
		return nil, err
	}
	cfg.Client, cfg.Bucket = js, bucket
	return New(context.Background(), cfg)
}

func (a kitSubject) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	return writeDelayed(ctx, a.bucket, r, func(ctx context.Context, g *Guard) error { return g.Put(fence.WithClaim(ctx, c), r, []byte(v)) })
}

func (a fenceKitSubject) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	return writeDelayed(ctx, a.bucket, r, func(ctx context.Context, g *Guard) error {
		return g.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error { return fence.Stage(ctx, []byte(v)) })
	})
}

// TestDelayedCopyIsHeld: the kit's delayed-duplicate check is not vacuous
// here: the first copy of the write's publish is held (the guard re-sent
// it and reports the write stored at revision 1), and delivered after a
// later write of the same run (revision 2) it is answered (deliver waits
// for the server's reply) and not stored.
func TestDelayedCopyIsHeld(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t, jetstreamKV(0))
	direct := guard(t, bucket, Config{})
	c := fence.Claim{Token: 5, Run: "run-a"}
	deliver, err := writeDelayed(ctx, bucket, "dup", func(ctx context.Context, g *Guard) error {
		n := 0
		g.afterPublish = func(error) { n++ }
		err := g.Put(fence.WithClaim(ctx, c), "dup", []byte("first"))
		if n != 2 {
			t.Errorf("%d publishes, want the held one and one re-send", n)
		}
		return err
	})
	if err != nil {
		t.Fatalf("delayed write: %v, want stored by the re-send", err)
	}
	if err := direct.Put(fence.WithClaim(ctx, c), "dup", []byte("later")); err != nil {
		t.Fatal(err)
	}
	if err := deliver(ctx); err != nil {
		t.Fatal(err)
	}
	b, info, err := direct.Get(ctx, "dup")
	if err != nil || string(b) != "later" || info.Revision != 2 {
		t.Fatalf("after the held copy was delivered: %q %+v %v, want later at revision 2", b, info, err)
	}
}
