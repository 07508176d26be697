package netproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/internal/netproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes each line back, prefixed by "echo:". It records how many
// lines it received so tests can tell "the request arrived" from "the reply
// arrived".
type echoServer struct {
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	received int
	conns    []net.Conn
	got      chan struct{}
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln, got: make(chan struct{}, 100)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.mu.Lock()
					s.received++
					s.mu.Unlock()
					s.got <- struct{}{}
					if _, err := io.WriteString(c, "echo:"+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func newProxy(t *testing.T, target string) *netproxy.Proxy {
	t.Helper()
	p, err := netproxy.New(target)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func dial(t *testing.T, p *netproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) string {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err := io.WriteString(c, msg+"\n")
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	return line
}

// expectSilence asserts nothing can be read within d: the read times out
// rather than failing or returning data.
func expectSilence(t *testing.T, c net.Conn, r *bufio.Reader, d time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	_, err := r.ReadString('\n')
	require.Error(t, err)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "want a timeout, got %v", err)
}

func TestForwards(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	require.Equal(t, "echo:hello\n", roundTrip(t, c, r, "hello"))
	require.Equal(t, 1, p.Live())
	require.Equal(t, 1, p.Accepted())
	require.Equal(t, s.ln.Addr().String(), p.Target())
	require.Equal(t, "127.0.0.1", p.Host())
	require.NotZero(t, p.Port())
}

func TestBadTarget(t *testing.T) {
	_, err := netproxy.New("no-port")
	require.Error(t, err)
}

func TestCutClosesAndRefusesUntilRestore(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	require.Equal(t, "echo:a\n", roundTrip(t, c, r, "a"))

	p.Cut()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := r.ReadString('\n')
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "a cut connection fails at once, not by timeout: %v", err)

	// New connections are accepted by the kernel but closed by the proxy.
	c2, r2 := dial(t, p)
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, _ = io.WriteString(c2, "b\n")
	_, err = r2.ReadString('\n')
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "refused connection fails at once: %v", err)

	p.Restore()
	c3, r3 := dial(t, p)
	require.Equal(t, "echo:c\n", roundTrip(t, c3, r3, "c"))
}

func TestBlackholeHangsThenDeliversOnRestore(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	require.Equal(t, "echo:a\n", roundTrip(t, c, r, "a"))
	<-s.got

	p.Blackhole()
	_, err := io.WriteString(c, "b\n")
	require.NoError(t, err)
	expectSilence(t, c, r, 200*time.Millisecond)
	s.mu.Lock()
	require.Equal(t, 1, s.received, "request must not reach the server while blackholed")
	s.mu.Unlock()

	// A connection opened during the blackhole is accepted and hangs too.
	c2, r2 := dial(t, p)
	_, err = io.WriteString(c2, "x\n")
	require.NoError(t, err)
	expectSilence(t, c2, r2, 100*time.Millisecond)

	p.Restore()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "echo:b\n", line, "held bytes are delivered after Restore")
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err = r2.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "echo:x\n", line)
}

func TestPauseDownstreamLosesRepliesOnly(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	require.Equal(t, "echo:a\n", roundTrip(t, c, r, "a"))
	<-s.got

	p.Pause(netproxy.Downstream)
	_, err := io.WriteString(c, "b\n")
	require.NoError(t, err)
	select {
	case <-s.got: // the request reached the server
	case <-time.After(5 * time.Second):
		t.Fatal("request did not reach the server while only replies were paused")
	}
	expectSilence(t, c, r, 150*time.Millisecond)
	p.Restore()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "echo:b\n", line)
}

func TestLatency(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	p.SetLatency(netproxy.Downstream, 150*time.Millisecond)
	start := time.Now()
	require.Equal(t, "echo:a\n", roundTrip(t, c, r, "a"))
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	p.SetLatency(netproxy.Both, 0)
}

func TestCloseStopsEverything(t *testing.T) {
	s := newEcho(t)
	p, err := netproxy.New(s.ln.Addr().String())
	require.NoError(t, err)
	c, r := dial(t, p)
	require.Equal(t, "echo:a\n", roundTrip(t, c, r, "a"))
	p.Blackhole() // goroutines parked in the gate must still stop
	_, _ = io.WriteString(c, "b\n")
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close is idempotent")
	require.Equal(t, 0, p.Live())
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err, "listener is closed")
	// goleak in TestMain checks no proxy goroutine outlives the tests.
}

func TestCloseConns(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	require.Equal(t, "echo:a\n", roundTrip(t, c, r, "a"))
	p.CloseConns()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := r.ReadString('\n')
	require.Error(t, err)
	c2, r2 := dial(t, p)
	require.Equal(t, "echo:b\n", roundTrip(t, c2, r2, "b"))
}

// TestOnHoldReportsHeldReply: with replies paused, OnHold is told once the
// server's reply has reached the proxy (and only then), with the direction;
// the client has not received it; Restore delivers it.
func TestOnHoldReportsHeldReply(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.ln.Addr().String())
	held := make(chan netproxy.Direction, 10)
	p.OnHold(func(d netproxy.Direction) { held <- d })
	c, r := dial(t, p)
	require.Equal(t, "echo:a\n", roundTrip(t, c, r, "a"))
	<-s.got
	require.Empty(t, held, "nothing is held while nothing is paused")

	p.Pause(netproxy.Downstream)
	_, err := io.WriteString(c, "b\n")
	require.NoError(t, err)
	select {
	case d := <-held:
		require.Equal(t, netproxy.Downstream, d)
	case <-time.After(5 * time.Second):
		t.Fatal("the held reply was not reported")
	}
	s.mu.Lock()
	received := s.received
	s.mu.Unlock()
	require.Equal(t, 2, received, "the server answered the request whose reply is held")
	expectSilence(t, c, r, 50*time.Millisecond)
	p.OnHold(nil)
	p.Restore()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "echo:b\n", line)
}
