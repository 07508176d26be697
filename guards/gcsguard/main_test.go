package gcsguard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"go.uber.org/goleak"
	"google.golang.org/api/option"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The client library's metrics/tracing plumbing and the HTTP/2
		// machinery of net/http keep package-level goroutines.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		// Keep-alive connections of net/http: a client connection whose
		// server side was closed at cleanup is sometimes still parked when
		// the check runs. They belong to net/http, not to the Guard, which
		// starts no goroutine of its own; storage.Writer's upload goroutine
		// is still checked.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// emulator is fake-gcs-server's in-process server behind a real loopback
// HTTP listener, so every client has its own connections. The handler in
// front of it can lose replies (fault) and serialises uploads (see
// serialise).
type emulator struct {
	srv *fakestorage.Server
	ts  *httptest.Server

	requests atomic.Int64 // HTTP requests served

	upload sync.Mutex // serialises uploads, see ServeHTTP
	last   int64      // UnixMicro after the previous upload

	mu    sync.Mutex
	fault func(r *http.Request) bool // true: run the request, then answer 503
}

func newEmulator(t testing.TB) *emulator {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		NoListener: true,
		PublicHost: ln.Addr().String(), // XML API reads on the same listener
	})
	if err != nil {
		_ = ln.Close()
		t.Fatal(err)
	}
	e := &emulator{srv: srv}
	e.ts = &httptest.Server{Listener: ln, Config: &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}}
	e.ts.Start()
	t.Cleanup(func() {
		e.ts.CloseClientConnections()
		e.ts.Close()
		srv.Stop()
	})
	return e
}

// ServeHTTP forwards to the emulator. Uploads are serialised and spaced at
// least a microsecond apart: the emulator numbers generations by the
// microsecond clock, so two writes of one object within the same
// microsecond would get the same generation, which real GCS never does
// (docs/guards-gcs.md). Serialising them changes nothing else: the
// emulator applies uploads one at a time under a lock anyway.
func (e *emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.requests.Add(1)
	e.mu.Lock()
	fault := e.fault
	e.mu.Unlock()
	isUpload := strings.HasPrefix(r.URL.Path, "/upload/")
	if isUpload {
		e.upload.Lock()
		for time.Now().UnixMicro() <= e.last {
			// spin: at most a microsecond
		}
		defer func() {
			e.last = time.Now().UnixMicro()
			e.upload.Unlock()
		}()
	}
	if fault != nil && fault(r) {
		rec := httptest.NewRecorder()
		e.srv.HTTPHandler().ServeHTTP(rec, r)
		http.Error(w, `{"error":{"code":503,"message":"reply lost (test)"}}`, http.StatusServiceUnavailable)
		return
	}
	e.srv.HTTPHandler().ServeHTTP(w, r)
}

// setFault installs f (nil removes it).
func (e *emulator) setFault(f func(r *http.Request) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fault = f
}

// client returns a new, independent storage client (own transport and
// connections) talking to the emulator.
func (e *emulator) client(t testing.TB, opts ...option.ClientOption) *storage.Client {
	t.Helper()
	return e.clientVia(t, nil, opts...)
}

// clientVia is client with wrap (when not nil) around the client's own
// transport.
func (e *emulator) clientVia(t testing.TB, wrap func(http.RoundTripper) http.RoundTripper, opts ...option.ClientOption) *storage.Client {
	t.Helper()
	tr := &http.Transport{}
	var rt http.RoundTripper = tr
	if wrap != nil {
		rt = wrap(tr)
	}
	opts = append([]option.ClientOption{
		option.WithEndpoint(e.ts.URL + "/storage/v1/"),
		option.WithHTTPClient(&http.Client{Transport: rt}),
	}, opts...)
	c, err := storage.NewClient(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		tr.CloseIdleConnections()
	})
	return c
}

// bucket creates a fresh bucket and returns its name.
func (e *emulator) bucket(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "fencekit-" + hex.EncodeToString(b[:])
	e.srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: name})
	return name
}

// store returns a Guard on a new client over a fresh bucket (or bucket, if
// given).
func (e *emulator) store(t testing.TB, bucket string, cfg Config) *Guard {
	t.Helper()
	if bucket == "" {
		bucket = e.bucket(t)
	}
	if cfg.Client == nil {
		cfg.Client = e.client(t)
	}
	cfg.Bucket = bucket
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
