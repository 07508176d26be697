package s3guard

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

var _ guardtest.DuplicateWriter = (*subject)(nil)

// heldRequest is a request the dupTransport kept from the server.
type heldRequest struct {
	method string
	url    string
	header http.Header
	body   []byte
	status int // the server's answer once delivered
}

// dupTransport forwards every request to MinIO, except that while armed
// for a key it keeps the FIRST PUT of that key (the pointer write: the
// commit point) from the server and fails it as a connection reset before
// the reply would, so the SDK retries; the retries go through. The kept
// copy is delivered later, unchanged, as a packet delayed in transit past
// the client's timeout would arrive. It may be armed for several keys at
// once.
type dupTransport struct {
	mu    sync.Mutex
	armed map[string]*heldRequest // "/bucket/key" -> nil until its first PUT is held
}

func (d *dupTransport) arm(bucket, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed == nil {
		d.armed = map[string]*heldRequest{}
	}
	d.armed["/"+bucket+"/"+key] = nil
}

// take disarms key and returns its held request (nil: none was sent).
func (d *dupTransport) take(bucket, key string) *heldRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.armed["/"+bucket+"/"+key]
	delete(d.armed, "/"+bucket+"/"+key)
	return h
}

func (d *dupTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	d.mu.Lock()
	h, armed := d.armed[req.URL.Path]
	hold := armed && h == nil && req.Method == http.MethodPut
	d.mu.Unlock()
	if !hold {
		return http.DefaultTransport.RoundTrip(req)
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
	d.armed[req.URL.Path] = &heldRequest{method: req.Method, url: req.URL.String(), header: req.Header.Clone(), body: body}
	d.mu.Unlock()
	return nil, errReplyLost
}

// deliver sends h to the server as it was sent and records the answer.
func (h *heldRequest) deliver(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, h.method, h.url, bytes.NewReader(h.body))
	if err != nil {
		return err
	}
	req.Header = h.header.Clone()
	req.ContentLength = int64(len(h.body))
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	h.status = resp.StatusCode
	return nil
}

// WriteDelayed implements guardtest.DuplicateWriter through the delayed
// store: its pointer PUT's first copy is held, the SDK's retries go
// through.
func (s *subject) WriteDelayed(ctx context.Context, resource string, c fence.Claim, value string) (func(context.Context) error, error) {
	h, err := s.writeDelayed(ctx, resource, c, value)
	return func(ctx context.Context) error {
		if h == nil {
			return fmt.Errorf("no pointer PUT was held: %w", guardtest.ErrNothingHeld)
		}
		return h.deliver(ctx)
	}, err
}

func (s *subject) writeDelayed(ctx context.Context, resource string, c fence.Claim, value string) (*heldRequest, error) {
	s.delay.arm(s.delayed.bucket, resource)
	err := s.write(fence.WithClaim(ctx, c), s.delayed, resource, c.Token, value)
	return s.delay.take(s.delayed.bucket, resource), err
}

// TestDelayedCopyRefused: the kit's delayed-duplicate check is not vacuous
// here. The first copy of a pointer PUT is held; the SDK's retry lands
// (the write reports success); a later write of the same run follows; the
// held copy, delivered then, is refused by MinIO (412: its If-Match names
// the ETag the later write replaced) and the later value stays.
func TestDelayedCopyRefused(t *testing.T) {
	forEachKind(t, func(t *testing.T, kind clientKind) {
		for _, viaFence := range []bool{false, true} {
			e := newEnv(t, kind)
			sub := newSubject(t, e, viaFence, func(*Config) {})
			ctx := testCtx(t)
			c := fence.Claim{Token: 5, Run: "run-a"}
			if err := sub.WriteClaim(ctx, "dup", c, "base"); err != nil {
				t.Fatal(err)
			}
			h, err := sub.writeDelayed(ctx, "dup", c, "first")
			if h == nil {
				t.Fatalf("fence %v: no pointer PUT held (write: %v)", viaFence, err)
			}
			if err != nil {
				t.Fatalf("fence %v: delayed write: %v, want its retry to land", viaFence, err)
			}
			if err := sub.WriteClaim(ctx, "dup", c, "later"); err != nil {
				t.Fatal(err)
			}
			if err := h.deliver(ctx); err != nil {
				t.Fatal(err)
			}
			if h.status != http.StatusPreconditionFailed {
				t.Errorf("fence %v: held copy answered %d, want 412", viaFence, h.status)
			}
			if v, tok, ok, err := sub.Read(ctx, "dup"); err != nil || !ok || v != "later" || tok != 5 {
				t.Errorf("fence %v: after the held copy: %q %d %v %v, want later at 5", viaFence, v, tok, ok, err)
			}
		}
	})
}
