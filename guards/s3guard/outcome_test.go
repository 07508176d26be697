package s3guard

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/internal/objtest"
)

// pointerPUT is the objtest transports' Key: the pointer PUT of a key
// ("/bucket/key") is the commit point.
func pointerPUT(req *http.Request) string {
	if req.Method != http.MethodPut {
		return ""
	}
	return req.URL.Path
}

// heldGuard returns a Guard of e's kind whose client goes through an
// objtest.ReplyTransport, configured like the subject's stores.
func heldGuard(t *testing.T, e env, mod func(*Config)) (*Guard, *objtest.ReplyTransport) {
	t.Helper()
	h := &objtest.ReplyTransport{Next: http.DefaultTransport, Key: pointerPUT}
	return e.store(t, e.newClient(t, h), mod), h
}

// WriteHeld implements guardtest.OutcomeWriter: the held store writes, its
// pointer PUT's reply held until ctx ends.
func (s *subject) WriteHeld(ctx context.Context, resource string, token fence.Token, value string, applied func()) error {
	path := "/" + s.held.bucket + "/" + resource
	s.hold.Arm(path, applied)
	defer s.hold.Disarm(path)
	return s.write(ctx, s.held, resource, token, value)
}

// WriteStrict implements guardtest.StrictWriter through a Guard with
// Config.Strict.
func (s *subject) WriteStrict(ctx context.Context, resource string, c fence.Claim, value string) error {
	return s.write(fence.WithClaim(ctx, c), s.strict, resource, c.Token, value)
}

var (
	_ guardtest.OutcomeWriter = (*subject)(nil)
	_ guardtest.StrictWriter  = (*subject)(nil)
)

// newSubject is the conformance subject over e: four stores (each with its
// own client, like separate processes), a strict one and a held one, all
// configured by mod.
func newSubject(t *testing.T, e env, viaFence bool, mod func(*Config)) *subject {
	sub := &subject{viaFence: viaFence}
	for range 4 {
		sub.stores = append(sub.stores, e.store(t, e.newClient(t, nil), mod))
	}
	sub.strict = e.store(t, e.newClient(t, nil), func(c *Config) {
		mod(c)
		c.Strict = true
	})
	sub.held, sub.hold = heldGuard(t, e, mod)
	sub.delay = &objtest.HoldTransport{Next: http.DefaultTransport, Err: errReplyLost, Key: pointerPUT}
	sub.delayed = e.store(t, e.newClient(t, sub.delay), mod)
	return sub
}

// A pointer PUT sent while the context ends before it (here: in the write
// callback, after the data was staged) sends nothing: "nothing written",
// never an unknown outcome, and the staged data is removed.
func TestContextEndedBeforeCommitIsNothingWritten(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		const key = "ended/before-commit"
		cause := errors.New("test: lease lost")
		ctx, cancel := context.WithCancelCause(testCtx(t))
		err := s.Fence(ctx, key, 3, func(ctx context.Context) error {
			if err := Stage(ctx, strings.NewReader("x"), 1, PutOptions{}); err != nil {
				return err
			}
			cancel(cause)
			return nil
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) || errors.Is(err, fence.ErrOutcomeUnknown) {
			t.Fatalf("error %v: want the context's end with its cause, not an unknown outcome", err)
		}
		for _, k := range e.listAll(t) {
			t.Errorf("object %q left behind", k)
		}
	})
}

// hangTransport never sends a PUT of path: it waits for the request's
// context to end (a request stuck on its way), and tells started when it
// begins waiting.
type hangTransport struct {
	path    string
	started chan struct{}
}

func (h *hangTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || req.URL.Path != h.path {
		return http.DefaultTransport.RoundTrip(req)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	close(h.started)
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// The context ends while the pointer PUT is in flight and, as the settling
// read (made with a context of its own) finds, it did not land: the outcome
// is still unknown (the request might land later), never "nothing
// written"; the error matches the context's end and its cause; the staged
// data is kept, because a pointer that lands later would refer to it.
func TestContextEndedDuringCommitNotLanded(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		const key = "ended/during-commit"
		_, err := put(t, e.store(t, nil, nil), key, 1, "before")
		if err != nil {
			t.Fatal(err)
		}
		ht := &hangTransport{path: "/" + e.bucket + "/" + key, started: make(chan struct{})}
		s := e.store(t, e.newClient(t, ht), nil)
		cause := errors.New("test: lease lost")
		ctx, cancel := context.WithCancelCause(testCtx(t))
		go func() {
			<-ht.started
			cancel(cause)
		}()
		_, err = s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 2)), key, []byte("mine"), PutOptions{})
		if !errors.Is(err, fence.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Fatalf("error %v: want an unknown outcome matching the context's end and its cause", err)
		}
		if got, gi := content(t, s, key); got != "before" || gi.Token != 1 {
			t.Fatalf("content %q token %d, want the earlier write", got, gi.Token)
		}
		var staged int
		for _, k := range e.listAll(t) {
			if strings.HasPrefix(k, dataKey(DefaultDataPrefix, key, 2, "")) {
				staged++
			}
		}
		if staged != 1 {
			t.Fatalf("%d staged data objects, want 1 (kept)", staged)
		}
	})
}
