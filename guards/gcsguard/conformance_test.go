package gcsguard

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// subject adapts a Store to the conformance kit: the value is the object's
// bytes, the token its metadata's.
type subject struct{ s *Store }

func (a subject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	_, err := a.s.PutWithToken(ctx, r, tok, strings.NewReader(v), PutOptions{ContentType: "text/plain"})
	return err
}

func (a subject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	_, err := a.s.PutClaim(ctx, r, c, strings.NewReader(v), PutOptions{})
	return err
}

func (a subject) WriteContext(ctx context.Context, r, v string) error {
	_, err := a.s.PutBytes(ctx, r, []byte(v), PutOptions{})
	return err
}

func (a subject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	return a.s.Fence(ctx, r, tok, func(ctx context.Context) error {
		if err := StageBytes(ctx, []byte("never"), PutOptions{}); err != nil {
			return err
		}
		return guardtest.ErrInjected
	})
}

func (a subject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	b, info, err := a.s.GetBytes(ctx, r)
	if errors.Is(err, ErrNotFound) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	return string(b), info.Token, true, nil
}

var kitResources = []string{".", "..", ".well-known/acme-challenge/x", " ", "\u00a0\u2003"}

func TestConformance(t *testing.T) {
	e := newEmulator(t)
	bucket := e.bucket(t)
	guardtest.Run(t, guardtest.Config{
		// Every check gets a Store on its own client (own connections).
		New:          func(t *testing.T) guardtest.Subject { return subject{e.store(t, bucket, Config{})} },
		BadResources: kitResources,
	})
}

// TestConformanceFence runs the kit through Fence with Stage: the path a
// write callback takes.
func TestConformanceFence(t *testing.T) {
	e := newEmulator(t)
	bucket := e.bucket(t)
	guardtest.Run(t, guardtest.Config{
		New:          func(t *testing.T) guardtest.Subject { return fenceSubject{subject{e.store(t, bucket, Config{})}} },
		BadResources: kitResources,
		Rounds:       10,
	})
}

type fenceSubject struct{ subject }

func (a fenceSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return a.s.Fence(ctx, r, tok, func(ctx context.Context) error {
		return StageBytes(ctx, []byte(v), PutOptions{})
	})
}
