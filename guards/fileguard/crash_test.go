//go:build unix

package fileguard

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// Environment of the crashing child: the directory and the step at which
// it kills itself.
const (
	envCrashDir  = "FILEGUARD_CRASH_DIR"
	envCrashStep = "FILEGUARD_CRASH_STEP"
)

// crashSteps are the points of a write, in order, with whether the new
// content is in place when the writer dies there.
var crashSteps = []struct {
	name     string
	replaced bool
}{
	{"locked", false},  // lock taken, mark not read yet
	{"partial", false}, // half of the temporary file written
	{"synced", false},  // temporary file complete and synced
	{"renamed", true},  // renamed over the old file, directory not synced
	{"done", true},     // directory synced, lock still held
}

const crashResource = "reports/q3"

// TestCrashAtEveryStep runs a writer in a child process (this same test,
// in child mode) that kills itself with SIGKILL at one step of a write of
// token 7 over content written under token 5. After each crash the file
// holds the old or the new content, whole, and the mark that wrote it; a
// token below that mark is refused; the dead writer's lock does not block
// the next writer, which also removes the temporary file it left; and the
// file is never a fileguard file that is not one of the two.
func TestCrashAtEveryStep(t *testing.T) {
	if step := os.Getenv(envCrashStep); step != "" {
		crashChild(t, os.Getenv(envCrashDir), step)
		return
	}
	ctx := context.Background()
	for _, step := range crashSteps {
		t.Run(step.name, func(t *testing.T) {
			dir := t.TempDir()
			g := newGuard(t, dir, Config{})
			if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "run-old"}), crashResource, []byte("old content")); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashAtEveryStep$", "-test.count=1") //nolint:gosec // this test binary
			cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashStep+"="+step.name)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die by SIGKILL at %s: %v\n%s", step.name, err, out)
			}
			b, info, err := g.Get(ctx, crashResource)
			if err != nil {
				t.Fatalf("after a crash at %s: %v", step.name, err)
			}
			want, wantTok := "old content", fence.Token(5)
			if step.replaced {
				want, wantTok = "new content", 7
			}
			if string(b) != want || info.Token != wantTok {
				t.Fatalf("after a crash at %s: %q under token %d, want %q under %d", step.name, b, info.Token, want, wantTok)
			}
			// Below the mark: refused. (After the replacement, token 6 is
			// stale too.)
			for _, tok := range []fence.Token{4, wantTok - 1} {
				if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok}), crashResource, []byte("stale")); !errors.Is(err, fence.ErrStale) {
					t.Fatalf("after a crash at %s: token %d: %v, want stale", step.name, tok, err)
				}
			}
			// The dead writer's lock is gone with it: the next write goes
			// through, and replaces its leftovers.
			if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 8}), crashResource, []byte("after")); err != nil {
				t.Fatalf("after a crash at %s: token 8: %v", step.name, err)
			}
			if b, info, err := g.Get(ctx, crashResource); err != nil || string(b) != "after" || info.Token != 8 {
				t.Fatalf("after a crash at %s and a new write: %q %+v %v", step.name, b, info, err)
			}
			// The dead writer's temporary file, named at random, was
			// removed by the next writer of the resource.
			if left := snapshot(t, filepath.Join(dir, StateDir, "tmp")); len(left) != 1 {
				t.Fatalf("after a crash at %s and a new write, temporary files are left: %v", step.name, left)
			}
		})
	}
}

// crashChild is the child's side: write token 7 and die at step.
func crashChild(t *testing.T, dir, step string) {
	g := newGuard(t, dir, Config{})
	g.step = func(name string) error {
		if name == step {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		return nil
	}
	err := g.Put(fence.WithClaim(context.Background(), fence.Claim{Token: 7, Run: "run-new"}), crashResource, []byte("new content"))
	t.Fatalf("child survived step %s: %v", step, err)
}
