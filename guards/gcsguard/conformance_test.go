package gcsguard

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

// subject adapts Guards over one bucket to the conformance kit: the value
// is the object's bytes, the token its metadata's. Writes go through s
// (Put, or Fence + Stage with viaFence); WriteStrict through a Guard with
// Config.Strict; WriteHeld through a Guard whose client holds the upload's
// reply until the write's context ends.
type subject struct {
	s, strict, held, delayed *Guard
	hold                     *objtest.ReplyTransport
	delay                    *objtest.HoldTransport
	viaFence                 bool
}

var (
	_ guardtest.ClaimWriter     = (*subject)(nil)
	_ guardtest.ContextWriter   = (*subject)(nil)
	_ guardtest.FailingWriter   = (*subject)(nil)
	_ guardtest.StrictWriter    = (*subject)(nil)
	_ guardtest.OutcomeWriter   = (*subject)(nil)
	_ guardtest.DuplicateWriter = (*subject)(nil)
	_ guardtest.Fencer          = (*subject)(nil)
	_ objtest.HeldWriter        = (*subject)(nil)
)

func newSubject(t *testing.T, e *emulator, bucket string, viaFence bool) *subject {
	h := &objtest.ReplyTransport{Key: uploadName}
	held := e.clientVia(t, func(rt http.RoundTripper) http.RoundTripper { h.Next = rt; return h })
	d := &objtest.HoldTransport{Err: errHeld, Key: uploadName}
	delayed := e.clientVia(t, func(rt http.RoundTripper) http.RoundTripper { d.Next = rt; return d })
	return &subject{
		s:        e.store(t, bucket, Config{}),
		strict:   e.store(t, bucket, Config{Strict: true}),
		held:     e.store(t, bucket, Config{Client: held}),
		delayed:  e.store(t, bucket, Config{Client: delayed}),
		hold:     h,
		delay:    d,
		viaFence: viaFence,
	}
}

// write is one guarded write of v to r through st under c.
func (a *subject) write(ctx context.Context, st *Guard, r string, c fence.Claim, v string) error {
	if a.viaFence {
		return st.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error {
			return StageBytes(ctx, []byte(v), PutOptions{})
		})
	}
	_, err := st.Put(fence.WithClaim(ctx, c), r, strings.NewReader(v), int64(len(v)), PutOptions{ContentType: "text/plain"})
	return err
}

func (a *subject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return a.write(ctx, a.s, r, fence.ClaimFor(ctx, tok), v)
}

func (a *subject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.write(ctx, a.s, r, c, v)
}

func (a *subject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.write(ctx, a.strict, r, c, v)
}

func (a *subject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	a.hold.Arm(r, applied)
	defer a.hold.Disarm(r)
	return a.write(ctx, a.held, r, fence.ClaimFor(ctx, tok), v)
}

func (a *subject) WriteContext(ctx context.Context, r, v string) error {
	if a.viaFence {
		return a.s.Do(ctx, r, func(ctx context.Context) error { return StageBytes(ctx, []byte(v), PutOptions{}) })
	}
	_, err := a.s.PutBytes(ctx, r, []byte(v), PutOptions{})
	return err
}

func (a *subject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	return a.s.Fence(ctx, r, tok, func(ctx context.Context) error {
		if err := StageBytes(ctx, []byte("never"), PutOptions{}); err != nil {
			return err
		}
		return guardtest.ErrInjected
	})
}

// Guard is the guard the subject's writes go through (guardtest.Fencer).
func (a *subject) Guard() fence.Guard { return a.s }

func (a *subject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	b, info, err := a.s.GetBytes(ctx, r)
	if errors.Is(err, fence.ErrNotFound) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	return string(b), info.Token, true, nil
}

// uploadName is the objtest transports' Key: the upload that writes a
// key is the commit point.
func uploadName(req *http.Request) string {
	if !strings.HasPrefix(req.URL.Path, "/upload/") {
		return ""
	}
	return req.URL.Query().Get("name")
}

var kitResources = []string{".", "..", ".well-known/acme-challenge/x", " ", "\u00a0\u2003"}

func TestConformance(t *testing.T) {
	e := newEmulator(t)
	bucket := e.bucket(t)
	guardtest.Run(t, guardtest.Config{
		// Every check gets Guards on clients of their own (own connections).
		New:          func(t *testing.T) guardtest.Subject { return newSubject(t, e, bucket, false) },
		BadResources: kitResources,
	})
}

// TestConformanceFence runs the kit through Fence with Stage: the path a
// write callback takes.
func TestConformanceFence(t *testing.T) {
	e := newEmulator(t)
	bucket := e.bucket(t)
	guardtest.Run(t, guardtest.Config{
		New:          func(t *testing.T) guardtest.Subject { return newSubject(t, e, bucket, true) },
		BadResources: kitResources,
		Rounds:       10,
	})
}
