//go:build unix

package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/fileguard"
	"github.com/fencekit/fencekit/guards/memguard"
)

func newFileGuard(t *testing.T) *fileguard.Guard {
	t.Helper()
	g, err := fileguard.New(fileguard.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func newMemGuard(t *testing.T) *memguard.Guard {
	t.Helper()
	g, err := memguard.New(memguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// wantValue fails t unless g's resource holds want under token tok.
func wantValue(t *testing.T, g *fileguard.Guard, resource, want string, tok fence.Token) {
	t.Helper()
	b, info, err := g.Get(context.Background(), resource)
	if err != nil || string(b) != want || info.Token != tok {
		t.Errorf("Get(%q) = %q, token %d, %v; want %q, token %d", resource, b, info.Token, err, want, tok)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// TestStageOutsideACallback: a context that comes from no running Fence
// callback (nil too) has nothing to stage into.
func TestStageOutsideACallback(t *testing.T) {
	var nilCtx context.Context
	for name, ctx := range map[string]context.Context{
		"background": context.Background(),
		"claim":      fence.WithClaim(context.Background(), fence.Claim{Token: 3}),
		"nil":        nilCtx,
	} {
		wantErr(t, name+": Stage", fence.Stage(ctx, []byte("x")), fence.ErrNoStager)
		wantErr(t, name+": StageDelete", fence.StageDelete(ctx), fence.ErrNoStager)
	}
}

// TestStageThroughTheGuardInterface: code that knows only fence.Guard
// stages the value its callback's Fence call writes, from the callback's
// context or one derived from it, once; after the call it is closed.
func TestStageThroughTheGuardInterface(t *testing.T) {
	fg := newFileGuard(t)
	var g fence.Guard = fg
	ctx := context.Background()
	var leaked context.Context
	err := g.Fence(ctx, "r", 4, func(ctx context.Context) error {
		leaked = ctx
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := fence.Stage(dctx, []byte("four")); err != nil {
			return err
		}
		wantErr(t, "second Stage", fence.Stage(ctx, []byte("again")), fence.ErrAlreadyStaged)
		wantErr(t, "StageDelete after Stage", fence.StageDelete(ctx), fence.ErrAlreadyStaged)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, fg, "r", "four", 4)
	wantErr(t, "Stage after Fence returned", fence.Stage(leaked, []byte("late")), fence.ErrStageClosed)
	wantErr(t, "StageDelete after Fence returned", fence.StageDelete(leaked), fence.ErrStageClosed)
	wantValue(t, fg, "r", "four", 4)

	// StageDelete leaves a tombstone under the new mark.
	if err := g.Fence(ctx, "r", 5, fence.StageDelete); err != nil {
		t.Fatal(err)
	}
	_, _, err = fg.Get(ctx, "r")
	var nf *fence.NotFoundError
	if !errors.As(err, &nf) || nf.Token != 5 {
		t.Errorf("Get after StageDelete: %v, want a *fence.NotFoundError with token 5", err)
	}

	// A callback that fails writes nothing it staged.
	boom := errors.New("boom")
	err = g.Fence(ctx, "s", 1, func(ctx context.Context) error {
		if err := fence.Stage(ctx, []byte("never")); err != nil {
			return err
		}
		return boom
	})
	wantErr(t, "failing callback", err, boom)
	_, _, err = fg.Get(ctx, "s")
	wantErr(t, "Get after a failing callback", err, fence.ErrNotFound)
}

// TestStageNested: in a Fence callback of one guard that runs a Fence
// call of another, the inner callback's context stages into the inner
// call and the outer context still stages into the outer one. A guard
// that does not stage (memguard) hides the outer callback: fence.Stage in
// its callback returns fence.ErrNoStager.
func TestStageNested(t *testing.T) {
	outer, inner, mem := newFileGuard(t), newFileGuard(t), newMemGuard(t)
	ctx := context.Background()
	err := outer.Fence(ctx, "o", 2, func(octx context.Context) error {
		err := inner.Fence(octx, "i", 7, func(ictx context.Context) error {
			if err := fence.Stage(ictx, []byte("inner")); err != nil {
				return err
			}
			return fence.Stage(octx, []byte("outer"))
		})
		if err != nil {
			return err
		}
		wantErr(t, "outer Stage after the inner call", fence.Stage(octx, []byte("again")), fence.ErrAlreadyStaged)
		return mem.Fence(octx, "m", 1, func(mctx context.Context) error {
			wantErr(t, "Stage in a memguard callback", fence.Stage(mctx, []byte("m")), fence.ErrNoStager)
			wantErr(t, "StageDelete in a memguard callback", fence.StageDelete(mctx), fence.ErrNoStager)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, outer, "o", "outer", 2)
	wantValue(t, inner, "i", "inner", 7)
	if _, _, err := inner.Get(ctx, "o"); !errors.Is(err, fence.ErrNotFound) {
		t.Errorf("the inner guard's o: %v, want fence.ErrNotFound", err)
	}

	// In a memguard callback inside a fileguard one, the outer context
	// still stages into the outer call.
	err = outer.Fence(ctx, "o", 3, func(octx context.Context) error {
		return mem.Fence(octx, "m", 2, func(context.Context) error {
			return fence.Stage(octx, []byte("from memguard's callback"))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, outer, "o", "from memguard's callback", 3)
}

// TestStageInAMemguardCallback: memguard does not stage.
func TestStageInAMemguardCallback(t *testing.T) {
	var g fence.Guard = newMemGuard(t)
	err := g.Fence(context.Background(), "m", 1, func(ctx context.Context) error {
		wantErr(t, "StageDelete", fence.StageDelete(ctx), fence.ErrNoStager)
		return fence.Stage(ctx, []byte("x"))
	})
	wantErr(t, "Fence", err, fence.ErrNoStager)
}
