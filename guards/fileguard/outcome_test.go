//go:build unix

package fileguard

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestNotFoundMatchesFence: a read of a missing, deleted or directory
// resource matches fence.ErrNotFound as well as fence.ErrNotFound.
func TestNotFoundMatchesFence(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t, t.TempDir(), Config{})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "d/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 1}), "del"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"missing", "missing/deeper", "del", "d", "d/x/below-a-file"} {
		_, _, err := g.Get(ctx, r)
		if !errors.Is(err, fence.ErrNotFound) {
			t.Errorf("Get(%q): %v, want fence.ErrNotFound and fence.ErrNotFound", r, err)
		}
	}
}

// TestNilContext: every call given a nil context returns an error matching
// fence.ErrNilArgument (Stage and StageDelete: fence.ErrNoStager) without panicking or
// touching the directory.
func TestNilContext(t *testing.T) {
	dir := t.TempDir()
	g := newGuard(t, dir, Config{})
	var nilCtx context.Context
	noop := func(context.Context) error { return nil }
	for name, call := range map[string]func() error{
		"Put":    func() error { return g.Put(nilCtx, "r", []byte("x")) },
		"Delete": func() error { return g.Delete(nilCtx, "r") },
		"Fence":  func() error { return g.Fence(nilCtx, "r", 1, noop) },
		"Do":     func() error { return g.Do(nilCtx, "r", noop) },
		"Get":    func() error { _, _, err := g.Get(nilCtx, "r"); return err },
		"Mark":   func() error { _, err := g.Mark(nilCtx, "r"); return err },
	} {
		panicked, err := callRecover(call)
		if panicked != nil || !errors.Is(err, fence.ErrNilArgument) {
			t.Errorf("%s(nil ctx): error %v, panic %v; want fence.ErrNilArgument", name, err, panicked)
		}
	}
	for name, call := range map[string]func() error{
		"fence.Stage":       func() error { return fence.Stage(nilCtx, []byte("x")) },
		"fence.StageDelete": func() error { return fence.StageDelete(nilCtx) },
	} {
		if panicked, err := callRecover(call); panicked != nil || !errors.Is(err, fence.ErrNoStager) {
			t.Errorf("%s(nil ctx): error %v, panic %v; want fence.ErrNoStager", name, err, panicked)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("directory not empty after calls with a nil context: %v", ents)
	}
}

// callRecover calls f and returns what it panicked with, if anything, and
// its error.
func callRecover(f func() error) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, f()
}
