//go:build unix

package fileguard

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestConfiguredPermissions: DirPerm and LockPerm set the modes of the
// directories and lock files the guard creates; a lock file found with
// more permission bits than LockPerm is narrowed; a DirPerm or LockPerm
// that would lock the owner out is refused by New.
func TestConfiguredPermissions(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	ctx := context.Background()
	dir := t.TempDir()
	g := newGuard(t, dir, Config{Perm: 0o660, DirPerm: 0o770, LockPerm: 0o660})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]fs.FileMode{
		"a": 0o770, "a/b": 0o660, StateDir: 0o770, StateDir + "/lock/a": 0o770, StateDir + "/lock/a/b": 0o660,
	} {
		if fi, err := os.Lstat(filepath.Join(dir, p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %#o", p, fi, err, want)
		}
	}
	// A lock file left with broader modes is narrowed by the next write.
	lock := filepath.Join(dir, StateDir, "lock", "wide")
	if err := os.WriteFile(lock, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := newGuard(t, dir, Config{}).Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "wide", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(lock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file created 0666, after a write: %v %v, want 0600", fi, err)
	}
	for _, cfg := range []Config{{DirPerm: 0o644}, {DirPerm: 0o077}, {DirPerm: os.ModeDir | 0o755}, {LockPerm: 0o400}, {LockPerm: 0o200}, {LockPerm: os.ModeSetuid | 0o600}} {
		cfg.Dir = dir
		if _, err := New(cfg); !errors.Is(err, fence.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want fence.ErrInvalidConfig", cfg, err)
		}
	}
}

// TestWriteOverDirectory: a write to a resource whose path is a directory
// (holding other resources) is refused with a *fence.ForeignError, and the
// directory is left as it is.
func TestWriteOverDirectory(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t, t.TempDir(), Config{})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var fe *fence.ForeignError
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 2}), "a", []byte("y")); !errors.As(err, &fe) || fe.Resource != "a" {
		t.Fatalf("write over the directory a: %v, want *fence.ForeignError", err)
	}
	if b, _, err := g.Get(ctx, "a/b"); err != nil || string(b) != "x" {
		t.Fatalf("a/b after the refused write: %q %v", b, err)
	}
}
