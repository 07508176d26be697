//go:build unix

package fileguard

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestForeignFiles: a file at a resource's path that this guard did not
// write (no header, a malformed token or run, a tombstone with content)
// refuses every write with a *fence.ForeignError and is left as it was.
func TestForeignFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g := newGuard(t, dir, Config{})
	for i, content := range []string{
		"plain text written by someone else",
		"",
		header + "t=abc r= k=v\nx",
		header + "t=07 r= k=v\nx",
		header + "t=0 r= k=v\nx",
		header + "t=9223372036854775808 r= k=v\nx",
		header + "t=5 r=bad;run k=v\nx",
		header + "t=5 r= k=x\nx",
		header + "t=5 r= k=d\ncontent after a tombstone",
		header + "t=5 r=\n",
		header + "t=5 r= k=v", // no newline
		header + strings.Repeat("x", maxHeader) + "\n",
	} {
		r := "foreign/" + string(rune('a'+i))
		p := g.Path(r)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tok := range []fence.Token{1, 5, 1 << 62} {
			err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, []byte("new"))
			var fe *fence.ForeignError
			if !errors.As(err, &fe) || fe.Resource != r || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrBusy) {
				t.Errorf("%q: token %d: %v, want *fence.ForeignError", content, tok, err)
			}
		}
		if err := g.Do(fence.WithToken(ctx, 9), r, func(context.Context) error {
			t.Errorf("%q: Fence ran its write over a foreign file", content)
			return nil
		}); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("%q: Do: %v", content, err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("%q: file changed to %q", content, b)
		}
		if _, _, err := g.Get(ctx, r); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("%q: Get: %v", content, err)
		}
		if _, err := g.Mark(ctx, r); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("%q: Mark: %v", content, err)
		}
	}
}

// TestBadArguments: bad resources and configs are refused with typed
// errors, and nothing is created in the directory.
func TestBadArguments(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g := newGuard(t, dir, Config{})
	for _, r := range append([]string{"", "a\x00b", "tab\t", "\xff", strings.Repeat("x", fence.MaxResourceLen+1)}, badResources...) {
		if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), r, []byte("v")); !errors.Is(err, fence.ErrInvalidResource) {
			t.Errorf("PutClaim(%q): %v, want fence.ErrInvalidResource", r, err)
		}
		if _, _, err := g.Get(ctx, r); !errors.Is(err, fence.ErrInvalidResource) {
			t.Errorf("Get(%q): %v", r, err)
		}
		if err := g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 1}), r); !errors.Is(err, fence.ErrInvalidResource) {
			t.Errorf("DeleteClaim(%q): %v", r, err)
		}
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1, Run: "bad run"}), "ok", []byte("v")); !errors.Is(err, fence.ErrInvalidRun) {
		t.Errorf("bad run: %v", err)
	}
	if err := g.Fence(ctx, "ok", 1, nil); !errors.Is(err, fence.ErrNilArgument) {
		t.Errorf("nil write: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("directory not empty after refused calls: %v", ents)
	}
	file := filepath.Join(dir, "file")
	_ = os.WriteFile(file, nil, 0o644)
	for _, cfg := range []Config{{}, {Dir: filepath.Join(dir, "missing")}, {Dir: file}, {Dir: dir, Perm: os.ModeDir | 0o755}} {
		if _, err := New(cfg); !errors.Is(err, fence.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

// TestLockTimeoutIsBusy: a writer that cannot take the lock within
// LockTimeout fails with fence.ErrBusy; with no bound (negative) it waits
// until its context ends and reports the context's error, never busy.
func TestLockTimeoutIsBusy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	holder := newGuard(t, dir, Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- holder.Fence(ctx, "busy", 3, func(ctx context.Context) error {
			close(entered)
			<-release
			return fence.Stage(ctx, []byte("holder"))
		})
	}()
	<-entered
	g := newGuard(t, dir, Config{LockTimeout: 50 * time.Millisecond})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 4}), "busy", []byte("x")); !errors.Is(err, fence.ErrBusy) {
		t.Errorf("lock held: %v, want fence.ErrBusy", err)
	}
	cause := errors.New("lease lost")
	cctx, cancel := context.WithTimeoutCause(ctx, 50*time.Millisecond, cause)
	defer cancel()
	err := newGuard(t, dir, Config{LockTimeout: -1}).Put(fence.WithClaim(cctx, fence.Claim{Token: 4}), "busy", []byte("x"))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cause) || errors.Is(err, fence.ErrBusy) {
		t.Errorf("context ended while waiting: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 4}), "busy", []byte("x")); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

// TestSyncFailureIsOutcomeUnknown: when the directory cannot be synced
// after the rename, the write is visible but may not survive a crash: the
// error is a *fence.OutcomeUnknownError.
func TestSyncFailureIsOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t, t.TempDir(), Config{})
	injected := errors.New("injected: fsync failed")
	g.step = func(name string) error {
		if name == "renamed" {
			return injected
		}
		return nil
	}
	err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 2}), "unsynced", []byte("two"))
	if !errors.Is(err, fence.ErrOutcomeUnknown) || !errors.Is(err, injected) || errors.Is(err, fence.ErrBusy) {
		t.Fatalf("unsynced write: %v, want fence.ErrOutcomeUnknown", err)
	}
	if oe, ok := fence.IsOutcomeUnknown(err); !ok || oe.Op != "fileguard: sync directory" || oe.Resource != "unsynced" {
		t.Fatalf("unsynced write: %#v, want *fence.OutcomeUnknownError of fileguard: sync directory", err)
	}
	g.step = nil
	if b, info, err := g.Get(ctx, "unsynced"); err != nil || string(b) != "two" || info.Token != 2 {
		t.Fatalf("after an unsynced write: %q %+v %v", b, info, err)
	}
}

// TestDeleteKeepsMark: a fenced delete leaves a tombstone that still
// refuses older tokens.
func TestDeleteKeepsMark(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t, t.TempDir(), Config{})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 4}), "d/x", []byte("four")); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 5}), "d/x"); err != nil {
		t.Fatal(err)
	}
	var nf *fence.NotFoundError
	if _, _, err := g.Get(ctx, "d/x"); !errors.As(err, &nf) || !nf.Deleted || nf.Token != 5 {
		t.Fatalf("Get after delete: %v", err)
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 4}), "d/x", []byte("again")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("older token after delete: %v", err)
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 6}), "d/x", []byte("six")); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsAndReuseLog: decisions are recorded with guard="file".
func TestMetricsAndReuseLog(t *testing.T) {
	ctx := context.Background()
	m := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	g := newGuard(t, t.TempDir(), Config{MeterProvider: m.Provider, Logger: logger})
	for _, c := range []fence.Claim{{Token: 5, Run: "run-a"}, {Token: 5, Run: "run-a"}, {Token: 3}, {Token: 5, Run: "run-b"}} {
		_ = g.Put(fence.WithClaim(ctx, c), "metrics", []byte("v"))
	}
	pts := m.Collect()
	attr := map[string]string{"guard": "file"}
	for name, want := range map[string]float64{"fencekit.guard.accepted": 2, "fencekit.guard.stale": 1, "fencekit.guard.reused": 1} {
		if got := obstest.Value(pts, name, attr); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if recs := logs.AtLeast(slog.LevelError); len(recs) != 1 || recs[0].Message != "fileguard: "+"token reused by a different run; write refused" {
		t.Errorf("reuse log: %+v", recs)
	}
}
