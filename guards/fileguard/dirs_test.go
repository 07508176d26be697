//go:build unix

package fileguard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestResourceDirectories: a write creates the missing directories of its
// resource (also when Config.Dir is not a clean path), a second write into
// an existing directory needs none, and a path whose parent is a file is
// refused with an error and writes nothing there.
func TestResourceDirectories(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "x"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, root + "/", root + "/x/../", "./" + mustRel(t, root)} {
		g := newGuard(t, dir, Config{})
		sub := filepath.Base(t.Name()) + "-" + filepath.Base(filepath.Clean(dir))
		for i, res := range []string{sub + "/a/b/c", sub + "/a/b/d", sub + "/a/e"} {
			if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: fence.Token(i + 1)}), res, []byte(res)); err != nil {
				t.Fatalf("Dir %q: PutClaim(%s): %v", dir, res, err)
			}
			if b, _, err := g.Get(ctx, res); err != nil || string(b) != res {
				t.Fatalf("Dir %q: Get(%s) = %q, %v", dir, res, b, err)
			}
		}
		err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 9}), sub+"/a/e/f", []byte("under a file"))
		if err == nil || errors.Is(err, fence.ErrOutcomeUnknown) {
			t.Fatalf("Dir %q: write below the file a/e: %v, want an error", dir, err)
		}
		if fi, err := os.Stat(filepath.Join(root, sub, "a", "e")); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("Dir %q: a/e after the refused write: %v, %v", dir, fi, err)
		}
	}
}

func mustRel(t *testing.T, path string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}
