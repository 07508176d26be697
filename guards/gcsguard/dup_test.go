package gcsguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// errHeld is what the client library sees for an upload the dupTransport
// holds: a connection reset before the reply, which it retries.
var errHeld = errors.New("connection reset by peer (test: request held in transit)")

// heldUpload is an upload the dupTransport kept from the emulator.
type heldUpload struct {
	next   http.RoundTripper
	method string
	url    string
	header http.Header
	body   []byte
	status int // the emulator's answer once delivered
}

// dupTransport forwards every request to next, except that while armed
// for a key it keeps the FIRST upload of that key (the commit point) from
// the emulator and fails it as a connection reset, so the client library
// retries; the retries go through. The kept copy is delivered later,
// unchanged, as a request delayed in transit past the client's timeout
// would arrive. It may be armed for several keys at once.
type dupTransport struct {
	next  http.RoundTripper
	mu    sync.Mutex
	armed map[string]*heldUpload // key -> nil until its first upload is held
}

func (d *dupTransport) arm(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed == nil {
		d.armed = map[string]*heldUpload{}
	}
	d.armed[key] = nil
}

// take disarms key and returns its held upload (nil: none was sent).
func (d *dupTransport) take(key string) *heldUpload {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.armed[key]
	delete(d.armed, key)
	return h
}

func (d *dupTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := ""
	if strings.HasPrefix(req.URL.Path, "/upload/") {
		key = req.URL.Query().Get("name")
	}
	d.mu.Lock()
	h, armed := d.armed[key]
	hold := key != "" && armed && h == nil
	d.mu.Unlock()
	if !hold {
		return d.next.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
	}
	d.mu.Lock()
	d.armed[key] = &heldUpload{next: d.next, method: req.Method, url: req.URL.String(), header: req.Header.Clone(), body: body}
	d.mu.Unlock()
	return nil, errHeld
}

// deliver sends h to the emulator as it was sent and records the answer.
func (h *heldUpload) deliver(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, h.method, h.url, bytes.NewReader(h.body))
	if err != nil {
		return err
	}
	req.Header = h.header.Clone()
	req.ContentLength = int64(len(h.body))
	resp, err := h.next.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	h.status = resp.StatusCode
	return nil
}

// WriteDelayed implements guardtest.DuplicateWriter through the delayed
// store: its upload's first copy is held, the library's retries go
// through.
func (a *subject) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	h, err := a.writeDelayed(ctx, r, c, v)
	return func(ctx context.Context) error {
		if h == nil {
			return fmt.Errorf("no upload was held: %w", guardtest.ErrNothingHeld)
		}
		return h.deliver(ctx)
	}, err
}

func (a *subject) writeDelayed(ctx context.Context, r string, c fence.Claim, v string) (*heldUpload, error) {
	a.delay.arm(r)
	err := a.write(ctx, a.delayed, r, c, v)
	return a.delay.take(r), err
}

// TestDelayedCopyRefused: the kit's delayed-duplicate check is not vacuous
// here. The first copy of the commit upload is held; the library's retry
// lands (the write reports success); a later write of the same run
// follows; the held copy, delivered then, is refused (412: its generation
// precondition names the generation the later write replaced) and the
// later value stays.
func TestDelayedCopyRefused(t *testing.T) {
	e := newEmulator(t)
	bucket := e.bucket(t)
	for _, viaFence := range []bool{false, true} {
		sub := newSubject(t, e, bucket, viaFence)
		ctx := context.Background()
		c := fence.Claim{Token: 5, Run: "run-a"}
		r := map[bool]string{false: "dup/put", true: "dup/fence"}[viaFence]
		if err := sub.WriteClaim(ctx, r, c, "base"); err != nil {
			t.Fatal(err)
		}
		h, err := sub.writeDelayed(ctx, r, c, "first")
		if h == nil {
			t.Fatalf("fence %v: no upload held (write: %v)", viaFence, err)
		}
		if err != nil {
			t.Fatalf("fence %v: delayed write: %v, want the library's retry to land", viaFence, err)
		}
		if err := sub.WriteClaim(ctx, r, c, "later"); err != nil {
			t.Fatal(err)
		}
		if err := h.deliver(ctx); err != nil {
			t.Fatal(err)
		}
		if h.status != http.StatusPreconditionFailed {
			t.Errorf("fence %v: held copy answered %d, want 412", viaFence, h.status)
		}
		if v, tok, ok, err := sub.Read(ctx, r); err != nil || !ok || v != "later" || tok != 5 {
			t.Errorf("fence %v: after the held copy: %q %d %v %v, want later at 5", viaFence, v, tok, ok, err)
		}
	}
}
