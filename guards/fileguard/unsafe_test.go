//go:build unix

package fileguard

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// snapshot lists every entry below root (without following links) with
// its type and content, to check that nothing was created or changed there.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		v := d.Type().String()
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p) //nolint:gosec // a test's own directory
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		m[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameTree(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for p, v := range after {
		if w, ok := before[p]; !ok {
			t.Errorf("%s: %s was created outside Dir (%q)", what, p, v)
		} else if w != v {
			t.Errorf("%s: %s outside Dir changed from %q to %q", what, p, w, v)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s: %s outside Dir was removed", what, p)
		}
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestSymlinksRefused: a symbolic link anywhere on the way to a resource's
// file, its lock file or its temporary file (a linked file, a linked
// directory at any depth, a link to "..", the state directory or one of
// its directories linked out) is refused with an *UnsafePathError by every
// call, and nothing outside Dir is created, changed or read. A link at the
// name a temporary file had before its names were random is ignored: the
// write goes through and the link's target is untouched.
func TestSymlinksRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		resource string
		link     string // below Dir
		target   string // "OUT" is replaced by the outside directory
		ok       bool   // the write is admitted (the link is not on its way)
	}{
		{name: "linked file", resource: "f", link: "f", target: "OUT/guarded"},
		{name: "linked directory", resource: "link/x", link: "link", target: "OUT"},
		{name: "linked deeper directory", resource: "a/link/b/c", link: "a/link", target: "OUT"},
		{name: "link to dot-dot", resource: "up/escaped", link: "up", target: ".."},
		{name: "linked state directory", resource: "s/x", link: StateDir, target: "OUT"},
		{name: "linked lock directory", resource: "l/x", link: StateDir + "/lock", target: "OUT"},
		{name: "linked lock file", resource: "lf", link: StateDir + "/lock/lf", target: "OUT/created-by-lock"},
		{name: "linked temporary directory", resource: "t/x", link: StateDir + "/tmp", target: "OUT"},
		{name: "link at a fixed temporary name", resource: "tf", link: StateDir + "/tmp/tf", target: "OUT/victim", ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir, outside := filepath.Join(base, "dir"), filepath.Join(base, "outside")
			for _, d := range []string{dir, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("precious"), 0o644); err != nil {
				t.Fatal(err)
			}
			// A file another guard wrote outside this one's Dir.
			og := newGuard(t, outside, Config{})
			if err := og.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "guarded", []byte("another tenant's secret")); err != nil {
				t.Fatal(err)
			}
			g := newGuard(t, dir, Config{})
			mustSymlink(t, strings.Replace(tc.target, "OUT", outside, 1), filepath.Join(dir, tc.link))
			before := snapshot(t, base)
			check := func(what string, err error) {
				t.Helper()
				var ue *UnsafePathError
				if tc.ok {
					if err != nil {
						t.Errorf("%s: %v, want accepted", what, err)
					}
					return
				}
				if !errors.As(err, &ue) || !errors.Is(err, ErrUnsafePath) || ue.Resource != tc.resource {
					t.Errorf("%s: %v, want *UnsafePathError", what, err)
				}
			}
			check("Put", g.Put(fence.WithClaim(ctx, fence.Claim{Token: 5}), tc.resource, []byte("escaped")))
			check("Fence", g.Fence(ctx, tc.resource, 6, func(ctx context.Context) error { return fence.Stage(ctx, []byte("escaped")) }))
			check("Delete", g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 7}), tc.resource))
			if !tc.ok && !strings.HasPrefix(tc.link, StateDir) {
				// Reads go through the resource's path only.
				b, _, err := g.Get(ctx, tc.resource)
				check("Get", err)
				if len(b) != 0 {
					t.Errorf("Get read %q through a link", b)
				}
				_, err = g.Mark(ctx, tc.resource)
				check("Mark", err)
			}
			after := snapshot(t, base)
			for p := range after {
				if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
					delete(after, p)
				}
			}
			for p := range before {
				if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
					delete(before, p)
				}
			}
			sameTree(t, tc.name, before, after)
		})
	}
	// ".." is refused by name, before any I/O.
	base := t.TempDir()
	dir := filepath.Join(base, "dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, base)
	g := newGuard(t, dir, Config{})
	for _, r := range []string{"..", "../x", "a/../../x", "a/.."} {
		var re *fence.ResourceError
		if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), r, []byte("x")); !errors.As(err, &re) {
			t.Errorf("Put(%q): %v, want *fence.ResourceError", r, err)
		}
	}
	sameTree(t, "dot-dot", before, snapshot(t, base))
}

// TestHardLinkedLockFileRefused: a lock file with a second name (a hard
// link to a file outside Dir) is refused with an *UnsafePathError: the
// guard writes into its lock files (the temporary file's name), and never
// into a file that is also somewhere else.
func TestHardLinkedLockFileRefused(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "dir"), filepath.Join(base, "outside")
	if err := os.MkdirAll(filepath.Join(dir, StateDir, "lock"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("precious content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(victim, filepath.Join(dir, StateDir, "lock", "hl")); err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, dir, Config{})
	if err := g.Put(fence.WithClaim(context.Background(), fence.Claim{Token: 1}), "hl", []byte("x")); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Put with a hard-linked lock file: %v, want ErrUnsafePath", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious content" {
		t.Errorf("the lock file's other name after the write: %q %v", b, err)
	}
}

// TestLinkSwappedDuringWrite: a directory on a resource's path replaced by
// a link out of Dir while a write runs (between its mark's read and its
// rename) does not redirect the write: it lands in the directory it had
// opened, or is refused when the directory did not exist yet.
func TestLinkSwappedDuringWrite(t *testing.T) {
	ctx := context.Background()
	for _, exists := range []bool{true, false} {
		base := t.TempDir()
		dir, outside := filepath.Join(base, "dir"), filepath.Join(base, "outside")
		for _, d := range []string{dir, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		g := newGuard(t, dir, Config{})
		if exists {
			if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "sub/x", []byte("one")); err != nil {
				t.Fatal(err)
			}
		}
		g.step = func(name string) error {
			if name != "synced" {
				return nil
			}
			if exists {
				if err := os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "moved")); err != nil {
					return err
				}
			}
			return os.Symlink(outside, filepath.Join(dir, "sub"))
		}
		err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 2}), "sub/x", []byte("two"))
		if exists {
			if err != nil {
				t.Errorf("directory moved during the write: %v, want accepted in the directory it opened", err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "moved", "x")); err != nil || !strings.HasSuffix(string(b), "\ntwo") {
				t.Errorf("moved/x after the write: %q, %v", b, err)
			}
		} else if !errors.Is(err, ErrUnsafePath) {
			t.Errorf("directory created as a link during the write: %v, want ErrUnsafePath", err)
		}
		if ents, err := os.ReadDir(outside); err != nil || len(ents) != 0 {
			t.Errorf("existing directory %v: outside Dir after the write: %v %v", exists, ents, err)
		}
	}
}

// TestFIFORefused: a FIFO at a resource's path, at its lock file's path or
// in place of one of its directories is refused at once with an
// *UnsafePathError, by writes and reads, without waiting for the FIFO's
// writer and without holding the resource's lock: another writer is not
// told busy meanwhile.
func TestFIFORefused(t *testing.T) {
	dir := t.TempDir()
	g := newGuard(t, dir, Config{})
	for _, p := range []string{"fifo", StateDir + "/lock/lockfifo", "fifodir"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(dir, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Put(fifo)", func(ctx context.Context) error { // first: probes the lock if it blocks
			return g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "fifo", []byte("x"))
		}},
		{"Get(fifo)", func(ctx context.Context) error { _, _, err := g.Get(ctx, "fifo"); return err }},
		{"Mark(fifo)", func(ctx context.Context) error { _, err := g.Mark(ctx, "fifo"); return err }},
		{"Put(lockfifo)", func(ctx context.Context) error {
			return g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "lockfifo", []byte("x"))
		}},
		{"Put(fifodir/x)", func(ctx context.Context) error {
			return g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "fifodir/x", []byte("x"))
		}},
		{"Get(fifodir/x)", func(ctx context.Context) error { _, _, err := g.Get(ctx, "fifodir/x"); return err }},
	}
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- c.call(ctx) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(3 * time.Second):
			t.Errorf("%s: still blocked 3 s after it started (1 s context)", c.name)
			if c.name == "Put(fifo)" {
				// Stuck in open, holding the resource's lock.
				busy := newGuard(t, dir, Config{LockTimeout: 100 * time.Millisecond}).
					Put(fence.WithToken(context.Background(), 2), "fifo", []byte("y"))
				t.Errorf("meanwhile another writer of the resource got %v", busy)
			}
			// Unblock it: a writer opens the FIFO (its reader is waiting).
			if f, oerr := os.OpenFile(filepath.Join(dir, "fifo"), os.O_WRONLY|syscall.O_NONBLOCK, 0); oerr == nil {
				_ = f.Close()
			}
			err = <-done
		}
		cancel()
		if !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%s after %v: %v, want ErrUnsafePath", c.name, time.Since(start), err)
		}
	}
	// The FIFOs are still there, nothing was written in their place.
	for _, p := range []string{"fifo", StateDir + "/lock/lockfifo", "fifodir"} {
		if fi, err := os.Lstat(filepath.Join(dir, p)); err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
			t.Errorf("%s after the refused calls: %v %v", p, fi, err)
		}
	}
}

// TestMarkOnlyWriteKeepsContent: a Fence callback that stages nothing
// raises the mark and carries the content over; when the content cannot be
// read as the file whose mark was decided on (here another program
// rewrote the file in place from inside the callback), the write fails and
// the file is left as it is, never rewritten with an empty body.
func TestMarkOnlyWriteKeepsContent(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t, t.TempDir(), Config{})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "r", []byte("body")); err != nil {
		t.Fatal(err)
	}
	if err := g.Fence(ctx, "r", 2, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if b, info, err := g.Get(ctx, "r"); err != nil || string(b) != "body" || info.Token != 2 {
		t.Fatalf("after a mark-only write: %q %+v %v, want \"body\" at token 2", b, info, err)
	}
	const foreign = "rewritten in place by another program"
	err := g.Fence(ctx, "r", 3, func(context.Context) error {
		return os.WriteFile(g.Path("r"), []byte(foreign), 0o644)
	})
	if !errors.Is(err, fence.ErrForeign) {
		t.Errorf("mark-only write over an unreadable body: %v, want fence.ErrForeign", err)
	}
	if b, err := os.ReadFile(g.Path("r")); err != nil || string(b) != foreign {
		t.Errorf("file after the refused mark-only write: %q %v, want it left as %q", b, err, foreign)
	}
}

// TestDefaultPermissions: lock files are readable by their owner only
// (whoever can open one can hold its flock and stall every writer), and
// directories are writable by their owner only, whatever Perm lets others
// do with the files. The umask is cleared so the guard's own modes show.
func TestDefaultPermissions(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	ctx := context.Background()
	for _, tc := range []struct {
		perm, dir fs.FileMode
	}{{0, 0o755}, {0o666, 0o755}, {0o640, 0o750}, {0o600, 0o700}} {
		dir := t.TempDir()
		g := newGuard(t, dir, Config{Perm: tc.perm})
		if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), "a/b", []byte("x")); err != nil {
			t.Fatal(err)
		}
		wantFile := tc.perm
		if wantFile == 0 {
			wantFile = 0o644
		}
		for p, want := range map[string]fs.FileMode{
			"a": tc.dir, "a/b": wantFile,
			StateDir: tc.dir, StateDir + "/lock": tc.dir, StateDir + "/lock/a": tc.dir, StateDir + "/tmp": tc.dir,
			StateDir + "/lock/a/b": 0o600,
		} {
			fi, err := os.Lstat(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("Perm %#o: %s has mode %#o, want %#o", tc.perm, p, got, want)
			}
		}
	}
}
