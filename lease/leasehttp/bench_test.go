package leasehttp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leasehttp"
)

const benchSubscribers = 1000

// dialStream opens a raw stream for k: one connection, the request sent.
func dialStream(b *testing.B, f *fixture, k lease.Key) net.Conn {
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	require.NoError(b, err)
	_, err = fmt.Fprintf(conn, "GET /?account=%s&session=%s HTTP/1.1\r\nHost: x\r\n\r\n", k.AccountID, k.SessionID)
	require.NoError(b, err)
	return conn
}

type receipt struct {
	token int64
	at    time.Time
}

// readEvents reports the id and arrival time of every taken-over or
// granted event (and the first event, "current") on conn.
func readEvents(conn net.Conn, out chan<- receipt) {
	br := bufio.NewReader(conn)
	var id int64
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "id: "):
			id, _ = strconv.ParseInt(line[4:], 10, 64)
		case line == "event: taken-over" || line == "event: granted" || line == "event: current":
			out <- receipt{token: id, at: time.Now()}
		}
	}
}

// BenchmarkTakeoverFanout: 1,000 streams on one key; each iteration is one
// Takeover by another Manager, and ends when all 1,000 clients got its
// event. Reports the delivery time from just before the Takeover call to
// each client's receipt (p50, p99, max). Iterations are DefaultPace apart,
// so that each measures the fan-out of one change, not the streams' pacing
// of changes that come faster than that.
func BenchmarkTakeoverFanout(b *testing.B) {
	f := newFixture(b, leasehttp.Config{MaxSubscribers: 2 * benchSubscribers}, nil)
	k := key()
	taker, err := lease.New(lease.Config{Pool: fencetest.Pool(b), Schema: f.schema})
	require.NoError(b, err)
	defer taker.Close()
	_, err = taker.Acquire(context.Background(), k)
	require.NoError(b, err)

	got := make(chan receipt, benchSubscribers)
	conns := make([]net.Conn, benchSubscribers)
	for i := range conns {
		conns[i] = dialStream(b, f, k)
		go readEvents(conns[i], got)
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range benchSubscribers { // every stream's first event
		<-got
	}
	var delays []time.Duration
	b.ResetTimer()
	for b.Loop() {
		time.Sleep(leasehttp.DefaultPace)
		start := time.Now()
		l, err := taker.Takeover(context.Background(), k)
		require.NoError(b, err)
		want := int64(l.Token())
		for n := 0; n < benchSubscribers; {
			r := <-got
			if r.token == want {
				delays = append(delays, r.at.Sub(start))
				n++
			}
		}
	}
	b.StopTimer()
	slices.Sort(delays)
	q := func(p float64) float64 {
		return float64(delays[int(p*float64(len(delays)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(q(1), "max_ms")
	b.ReportMetric(float64(benchSubscribers), "subscribers")
}

// BenchmarkIdleSubscribers: the cost of 1,000 streams whose clients never
// read, after a burst of 200 takeovers, and the heap's growth over 800
// more: heap and goroutines per subscriber (server and client sides of the
// loopback connections together).
func BenchmarkIdleSubscribers(b *testing.B) {
	for b.Loop() {
		f := newFixture(b, leasehttp.Config{MaxSubscribers: 2 * benchSubscribers}, nil)
		k := key()
		taker, err := lease.New(lease.Config{Pool: fencetest.Pool(b), Schema: f.schema})
		require.NoError(b, err)
		_, err = taker.Acquire(context.Background(), k)
		require.NoError(b, err)

		base := heap()
		g0 := runtime.NumGoroutine()
		conns := make([]net.Conn, benchSubscribers)
		for i := range conns {
			conns[i] = dialStream(b, f, k)
		}
		deadline := time.Now().Add(30 * time.Second)
		for f.h.Subscribers() < benchSubscribers {
			require.True(b, time.Now().Before(deadline), "subscribers connect")
			time.Sleep(5 * time.Millisecond)
		}
		burst := func(n int) {
			for range n {
				_, err := taker.Takeover(context.Background(), k)
				require.NoError(b, err)
			}
		}
		burst(200)
		after := heap()
		burst(800)
		later := heap()
		b.ReportMetric(float64(after-base)/benchSubscribers, "heap_B/sub")
		b.ReportMetric((float64(later)-float64(after))/benchSubscribers, "growth_B/sub_per_800_more")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/benchSubscribers, "goroutines/sub")
		for _, c := range conns {
			_ = c.Close()
		}
		_ = taker.Close()
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
