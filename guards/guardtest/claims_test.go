package guardtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// bugs are the defects buggyGuard can be given, one per broken subject.
type bugs struct {
	endedBusy     bool // ended ctx answered with ErrBusy (and ctx.Err())
	endedNoCause  bool // ended ctx answered with ctx.Err() only, dropping the cause
	ignoreCtx     bool // ended ctx not checked: the write goes ahead
	noTokenWrites bool // Do without a claim writes under token 1
	doIgnoresMark bool // Do admits every token
	doDropsRun    bool // Do ignores the claim's run identity
	decideNoRun   bool // token-only decision: reuse never refused
	markDropsRun  bool // a run-less write erases the mark's run
	noRunCheck    bool // run identities not validated
}

// buggyGuard is refGuard with the defects in b.
type buggyGuard struct {
	b     bugs
	mu    sync.Mutex
	marks map[string]fence.Token
	runs  map[string]string
}

func newBuggy(b bugs) *buggyGuard {
	return &buggyGuard{b: b, marks: map[string]fence.Token{}, runs: map[string]string{}}
}

func (g *buggyGuard) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	return g.fenceClaim(ctx, r, fence.ClaimFor(ctx, tok), false, write)
}

func (g *buggyGuard) Do(ctx context.Context, r string, write func(context.Context) error) error {
	c, err := fence.ClaimFromContext(ctx)
	switch {
	case errors.Is(err, fence.ErrNoToken) && g.b.noTokenWrites:
		c = fence.Claim{Token: 1}
	case err != nil:
		return err
	}
	if g.b.doDropsRun {
		c.Run = ""
	}
	return g.fenceClaim(ctx, r, c, g.b.doIgnoresMark, write)
}

func (g *buggyGuard) fenceClaim(ctx context.Context, r string, c fence.Claim, admitAll bool, write func(context.Context) error) error {
	if err := fence.CheckArgs(r, c.Token); err != nil {
		return err
	}
	if err := fence.ValidateRun(c.Run); err != nil && !g.b.noRunCheck {
		return err
	}
	if ctx.Err() != nil {
		switch {
		case g.b.endedBusy:
			return fmt.Errorf("%w: %w", fence.ErrBusy, ctx.Err())
		case g.b.endedNoCause:
			return ctx.Err()
		case g.b.ignoreCtx:
		default:
			return fence.ContextError(ctx)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var err error
	switch {
	case admitAll:
	case g.b.decideNoRun:
		err = fence.Decide(r, c.Token, g.marks[r])
	default:
		err = fence.DecideClaim(r, c, g.marks[r], g.runs[r])
	}
	if err != nil {
		return err
	}
	if err := write(ctx); err != nil {
		return err
	}
	tok, run := fence.NextMark(c, g.marks[r], g.runs[r])
	if g.b.markDropsRun {
		run = c.Run
	}
	if tok >= g.marks[r] {
		g.marks[r], g.runs[r] = tok, run
	}
	return nil
}

// Each new check passes the correct guard and fails a guard with one defect
// in the behaviour it checks.
func TestClaimChecksDetectBrokenGuards(t *testing.T) {
	cfg := defaults(t)
	checks := map[string]guardtest.Check{}
	for _, c := range guardtest.Checks() {
		checks[c.Name] = c
	}
	run := func(name string, b bugs) error {
		c, ok := checks[name]
		require.True(t, ok, "no check %s", name)
		return c.Func(context.Background(), guardtest.FromGuard(newBuggy(b), guardtest.NewMapStore()), cfg)
	}
	all := []string{"EndedContextRefused", "EndedContextRefusedContextForm", "NoTokenRefused", "ContextFormMatchesWrite", "TokenReuseRefused"}
	for _, name := range all {
		assert.NoError(t, run(name, bugs{}), "the correct guard fails %s", name)
	}
	for _, tc := range []struct {
		name  string
		b     bugs
		fails []string
		want  string
	}{
		{"ended ctx is busy", bugs{endedBusy: true}, []string{"EndedContextRefused", "EndedContextRefusedContextForm"}, "matches fence.ErrBusy"},
		{"ended ctx without cause", bugs{endedNoCause: true}, []string{"EndedContextRefused", "EndedContextRefusedContextForm"}, "does not match the context's cause"},
		{"ended ctx ignored", bugs{ignoreCtx: true}, []string{"EndedContextRefused", "EndedContextRefusedContextForm"}, "accepted"},
		{"no token writes", bugs{noTokenWrites: true}, []string{"NoTokenRefused"}, "without a claim accepted"},
		{"ctx form ignores the mark", bugs{doIgnoresMark: true}, []string{"ContextFormMatchesWrite"}, "want stale refusal"},
		{"ctx form drops the run", bugs{doDropsRun: true}, []string{"ContextFormMatchesWrite"}, "want fence.ErrTokenReused"},
		{"token-only decision", bugs{decideNoRun: true}, []string{"TokenReuseRefused", "ContextFormMatchesWrite"}, "want fence.ErrTokenReused"},
		{"run-less write erases the run", bugs{markDropsRun: true}, []string{"TokenReuseRefused"}, "must keep the mark's run"},
		{"runs not validated", bugs{noRunCheck: true}, []string{"TokenReuseRefused"}, "want fence.ErrInvalidRun"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range all {
				err := run(name, tc.b)
				if !contains(tc.fails, name) {
					assert.NoError(t, err, "check %s should pass", name)
					continue
				}
				require.Error(t, err, "check %s should fail", name)
				if name == tc.fails[0] {
					assert.Contains(t, err.Error(), tc.want)
				}
			}
		})
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// fenceOnly is a correct guard with neither a ctx-first form nor a
// ClaimWriter subject.
type fenceOnly struct{ g *refGuard }

func (f fenceOnly) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	return f.g.Fence(ctx, r, tok, write)
}

// fenceOnlySubject hides FromGuard's ClaimWriter.
type fenceOnlySubject struct{ s guardtest.Subject }

func (f fenceOnlySubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return f.s.Write(ctx, r, tok, v)
}

func (f fenceOnlySubject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	return f.s.Read(ctx, r)
}

func TestClaimChecksNeedTheirInterfaces(t *testing.T) {
	cfg := defaults(t)
	want := map[string]string{
		"EndedContextRefusedContextForm": guardtest.InterfaceContextWriter,
		"NoTokenRefused":                 guardtest.InterfaceContextWriter,
		"ContextFormMatchesWrite":        guardtest.InterfaceContextWriter,
		"TokenReuseRefused":              guardtest.InterfaceClaimWriter,
		"FailedWriteKeepsMark":           "FailingWriter",
		"OutcomeUnknownReported":         guardtest.InterfaceOutcomeWriter,
		"DelayedDuplicateNotApplied":     guardtest.InterfaceDuplicateWriter,
		"StrictScopeRefused":             guardtest.InterfaceStrictWriter,
		"FenceCallbackCarriesClaim":      guardtest.InterfaceFencer,
		"FenceOnMissingResource":         guardtest.InterfaceFencer,
	}
	s := fenceOnlySubject{guardtest.FromGuard(fenceOnly{newRef()}, guardtest.NewMapStore())}
	for _, c := range guardtest.Checks() {
		err := c.Func(context.Background(), s, cfg)
		iface, ok := want[c.Name]
		if !ok {
			assert.NoError(t, err, c.Name)
			continue
		}
		require.ErrorIs(t, err, guardtest.ErrUnsupported, c.Name)
		var ue *guardtest.UnsupportedError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, iface, ue.Interface, c.Name)
	}
	_, err := guardtest.Config{Pending: []string{"FailingWriter"}}.WithDefaults()
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
}

// Run fails a Subject that lacks ClaimWriter, ContextWriter or StrictWriter
// unless they are listed in Config.Pending; then it skips exactly those checks and logs
// which and why. The test runs the kit in a child process of the test binary
// (this same test, with GUARDTEST_POLICY_HELPER set), whose failure is the
// expected outcome in one mode.
func TestRunRequiresOptionalInterfaces(t *testing.T) {
	if mode := os.Getenv("GUARDTEST_POLICY_HELPER"); mode != "" {
		cfg := guardtest.Config{New: func(*testing.T) guardtest.Subject {
			return fenceOnlySubject{guardtest.FromGuard(fenceOnly{newRef()}, guardtest.NewMapStore())}
		}}
		if mode == "pending" {
			cfg.Pending = []string{guardtest.InterfaceClaimWriter, guardtest.InterfaceContextWriter, guardtest.InterfaceStrictWriter}
		}
		guardtest.Run(t, cfg)
		return
	}
	child := func(mode string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunRequiresOptionalInterfaces$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "GUARDTEST_POLICY_HELPER="+mode)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := child("required")
	require.Error(t, err, "Run passed a subject without ClaimWriter and ContextWriter:\n%s", out)
	for _, name := range []string{"EndedContextRefusedContextForm", "NoTokenRefused", "ContextFormMatchesWrite", "TokenReuseRefused", "StrictScopeRefused"} {
		assert.Contains(t, out, "--- FAIL: TestRunRequiresOptionalInterfaces/"+name, out)
	}
	assert.Contains(t, out, `list "ContextWriter" in Config.Pending`)
	assert.Contains(t, out, "--- PASS: TestRunRequiresOptionalInterfaces/EndedContextRefused ")

	out, err = child("pending")
	require.NoError(t, err, "Run with Pending failed:\n%s", out)
	for _, name := range []string{"EndedContextRefusedContextForm", "NoTokenRefused", "ContextFormMatchesWrite", "TokenReuseRefused",
		"FailedWriteKeepsMark", "OutcomeUnknownReported", "DelayedDuplicateNotApplied", "StrictScopeRefused",
		"FenceCallbackCarriesClaim", "FenceOnMissingResource"} {
		assert.Contains(t, out, "--- SKIP: TestRunRequiresOptionalInterfaces/"+name, out)
	}
	assert.Contains(t, out, "guardtest: 10 check(s) skipped: ")
	assert.Contains(t, out, "OutcomeUnknownReported (no guardtest.OutcomeWriter: not implemented)")
	assert.Contains(t, out, "TokenReuseRefused (no guardtest.ClaimWriter: listed in Config.Pending)")
	assert.Contains(t, out, "FailedWriteKeepsMark (no guardtest.FailingWriter: not implemented)")
	assert.Contains(t, out, "--- PASS: TestRunRequiresOptionalInterfaces/EndedContextRefused ")
}
