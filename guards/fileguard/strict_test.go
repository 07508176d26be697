//go:build unix

package fileguard

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

var (
	_ guardtest.ClaimWriter   = kitSubject{}
	_ guardtest.ContextWriter = kitSubject{}
	_ guardtest.FailingWriter = kitSubject{}
	_ guardtest.StrictWriter  = kitSubject{}
	_ guardtest.StrictWriter  = fenceKitSubject{}
)

// kitSubject is subject (PutClaim, Put, Get) plus WriteStrict through a
// guard with Config.Strict over the same directory: it runs every kit check
// that applies to local files. Two do not, and are skipped (and logged) by
// design rather than faked: it has no WriteHeld (guardtest.OutcomeWriter),
// because a write is local system calls, with no reply that could be lost
// while the write is applied; and no WriteDelayed
// (guardtest.DuplicateWriter), because nothing carries a copy of a write in
// transit that could reach the file later: no network, no client that
// re-sends, no request queued outside the writer's own call, which holds
// the resource's lock until it returns.
type kitSubject struct {
	subject
	strict *Guard
}

func (a kitSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.strict.Put(fence.WithClaim(ctx, c), r, []byte(v))
}

// fenceKitSubject is fenceSubject (Fence, Do with Stage) plus WriteStrict
// through a strict guard's Fence.
type fenceKitSubject struct {
	fenceSubject
	strict *Guard
}

func (a fenceKitSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.strict.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error { return fence.Stage(ctx, []byte(v)) })
}

// TestStrictRefusesBeforeIO: a strict guard refuses a resource outside the
// claim's scope, and a claim without a scope, with *fence.ScopeError
// without touching the file system: its directory is removed after New,
// so any lock, read or write would fail with a path error instead.
func TestStrictRefusesBeforeIO(t *testing.T) {
	dir := t.TempDir() + "/gone"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, dir, Config{Strict: true})
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scoped := fence.Claim{Token: 3, Scope: "acme/conv-1"}
	for _, tc := range []struct {
		r string
		c fence.Claim
	}{{"acme/conv-2/notes", scoped}, {"acme/conv-1/notes", fence.Claim{Token: 3}}} {
		for name, err := range map[string]error{
			"PutClaim":    g.Put(fence.WithClaim(ctx, tc.c), tc.r, []byte("x")),
			"DeleteClaim": g.Delete(fence.WithClaim(ctx, tc.c), tc.r),
			"Put":         g.Put(fence.WithClaim(ctx, tc.c), tc.r, []byte("x")),
			"Fence": g.Fence(fence.WithClaim(ctx, tc.c), tc.r, tc.c.Token, func(context.Context) error {
				t.Errorf("Fence ran its write for %q outside the claim's scope", tc.r)
				return nil
			}),
		} {
			se, ok := fence.IsOutOfScope(err)
			if !ok || *se != (fence.ScopeError{Resource: tc.r, Scope: tc.c.Scope}) {
				t.Errorf("%s(%q) under scope %q: %v, want *fence.ScopeError", name, tc.r, tc.c.Scope, err)
			}
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the guard's directory was recreated: %v", err)
	}
}

// TestGetDirectoryNotFound: once a/b is written, a's path is a directory;
// Get(a) reports it not found (it has no content), not a read error.
func TestGetDirectoryNotFound(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t, t.TempDir(), Config{})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var nf *fence.NotFoundError
	if _, _, err := g.Get(ctx, "a"); !errors.As(err, &nf) || nf.Deleted || nf.Token != 0 {
		t.Fatalf("Get(a) with a/b written: %v, want *fence.NotFoundError", err)
	}
}
