package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// fakeDriver answers each Commit and Settle from scripted results and
// counts the attempts.
type fakeDriver struct {
	mark    fence.Claim
	commits []Result // one per Commit, the last repeated
	settles []Result // one per Settle, the last repeated
	settle  error    // Settle's error with Failed
	opens   int
	sent    []Change
}

type fakeAttempt struct{ d *fakeDriver }

func (d *fakeDriver) Open(context.Context, string, Read) (Attempt, error) {
	d.opens++
	return fakeAttempt{d}, nil
}

func next(rs *[]Result) Result {
	r := (*rs)[0]
	if len(*rs) > 1 {
		*rs = (*rs)[1:]
	}
	return r
}

func (a fakeAttempt) Mark() (fence.Claim, bool, bool) { return a.d.mark, true, false }
func (a fakeAttempt) Close()                          {}
func (a fakeAttempt) Commit(_ context.Context, _ fence.Claim, ch Change, _ string) (Result, error) {
	a.d.sent = append(a.d.sent, ch)
	r := next(&a.d.commits)
	if r == Lost {
		return r, errors.New("reply lost")
	}
	return r, nil
}
func (a fakeAttempt) Settle(context.Context, fence.Claim, Change, string, error) (Result, error) {
	r := next(&a.d.settles)
	if r == Failed {
		return r, a.d.settle
	}
	return r, nil
}

func newEngine(d Driver, max int) *Engine {
	return &Engine{Args: Args{Name: "testguard"}, Driver: d, Op: "testguard: write", MaxAttempts: max}
}

func TestLoopOutcomes(t *testing.T) {
	ctx := context.Background()
	c := fence.Claim{Token: 5}
	t.Run("lost races end busy after MaxAttempts", func(t *testing.T) {
		d := &fakeDriver{commits: []Result{Conflict}}
		err := newEngine(d, 3).PutClaim(ctx, "r", c, []byte("v"))
		if !errors.Is(err, fence.ErrBusy) || len(d.sent) != 3 {
			t.Fatalf("err %v after %d commits, want fence.ErrBusy after 3", err, len(d.sent))
		}
	})
	t.Run("lost races as ctx ends: the context's error, not busy", func(t *testing.T) {
		// The last attempt loses its race while the caller's context ends:
		// the call reports the context's end (docs/guards.md: a call whose
		// context ended never reports busy), for Put and for Fence.
		for _, fenced := range []bool{false, true} {
			cctx, cancel := context.WithCancel(ctx)
			d := &fakeDriver{commits: []Result{Conflict}}
			e := newEngine(d, 2)
			e.Driver = driverFunc(func() (Attempt, error) {
				d.opens++
				return cancelAttempt{fakeAttempt{d}, func() {
					if len(d.sent) == 2 { // the last attempt's request is out
						cancel()
					}
				}}, nil
			})
			var err error
			if fenced {
				err = e.Fence(cctx, "r", 5, func(context.Context) error { return nil })
			} else {
				err = e.PutClaim(cctx, "r", c, []byte("v"))
			}
			if !errors.Is(err, context.Canceled) || errors.Is(err, fence.ErrBusy) {
				t.Fatalf("fenced %v: err %v after %d commits, want context.Canceled and not fence.ErrBusy", fenced, err, len(d.sent))
			}
			cancel()
		}
	})
	t.Run("settled not applied is sent again, then NotApplied", func(t *testing.T) {
		d := &fakeDriver{commits: []Result{Lost}, settles: []Result{NotApplied}}
		err := newEngine(d, 2).PutClaim(ctx, "r", c, []byte("v"))
		if _, ok := fence.IsNotApplied(err); !ok || len(d.sent) != 2 {
			t.Fatalf("err %v after %d commits, want *fence.NotAppliedError after 2", err, len(d.sent))
		}
	})
	t.Run("a lost reply settled as applied succeeds", func(t *testing.T) {
		d := &fakeDriver{commits: []Result{Lost}, settles: []Result{Committed}}
		if err := newEngine(d, 0).PutClaim(ctx, "r", c, nil); err != nil || len(d.sent) != 1 {
			t.Fatalf("err %v after %d commits, want nil after 1", err, len(d.sent))
		}
	})
	t.Run("stale after a conflicting settle is overtaken", func(t *testing.T) {
		// The first commit's reply is lost and settled as a conflict; the
		// second attempt reads a newer mark and is refused before committing.
		d := &fakeDriver{commits: []Result{Lost}, settles: []Result{Conflict}}
		e := newEngine(d, 0)
		first := true
		e.Driver = driverFunc(func() (Attempt, error) {
			if first {
				first = false
				return fakeAttempt{d}, nil
			}
			d.mark = fence.Claim{Token: 9}
			return fakeAttempt{d}, nil
		})
		se, ok := fence.IsStale(e.PutClaim(ctx, "r", c, nil))
		if !ok || !se.Overtaken {
			t.Fatalf("got %+v, want a stale refusal with Overtaken", se)
		}
	})
	t.Run("a refusal on the mark read first never runs write", func(t *testing.T) {
		d := &fakeDriver{mark: fence.Claim{Token: 7}, commits: []Result{Committed}}
		called := false
		err := newEngine(d, 0).Fence(ctx, "r", 5, func(context.Context) error { called = true; return nil })
		if !errors.Is(err, fence.ErrStale) || called || len(d.sent) != 0 {
			t.Fatalf("err %v, write called %v, %d commits", err, called, len(d.sent))
		}
	})
}

type driverFunc func() (Attempt, error)

func (f driverFunc) Open(context.Context, string, Read) (Attempt, error) { return f() }

func TestFenceStagesAndCarriesClaim(t *testing.T) {
	d := &fakeDriver{commits: []Result{Committed}}
	e := newEngine(d, 0)
	ctx := fence.WithClaim(context.Background(), fence.Claim{Token: 4, Run: "run-a"})
	var inside context.Context
	err := e.Fence(ctx, "r", 4, func(ctx context.Context) error {
		inside = ctx
		if c, err := fence.ClaimFromContext(ctx); err != nil || c.Run != "run-a" || c.Token != 4 {
			t.Errorf("claim in write: %+v, %v", c, err)
		}
		if err := Stage(ctx, "otherguard", Change{Op: OpPut}); !errors.Is(err, fence.ErrNoStager) {
			t.Errorf("another guard's Stage: %v, want fence.ErrNoStager", err)
		}
		if err := Stage(ctx, "testguard", Change{Op: OpPut, Value: []byte("v")}); err != nil {
			t.Errorf("Stage: %v", err)
		}
		return Stage(ctx, "testguard", Change{Op: OpDelete})
	})
	if !errors.Is(err, fence.ErrAlreadyStaged) || len(d.sent) != 0 {
		t.Fatalf("second Stage's error from write: %v (%d commits), want fence.ErrAlreadyStaged and none", err, len(d.sent))
	}
	if err := Stage(inside, "testguard", Change{Op: OpPut}); !errors.Is(err, fence.ErrStageClosed) {
		t.Fatalf("Stage after Fence returned: %v, want fence.ErrStageClosed", err)
	}
	if err := e.Fence(ctx, "r", 4, func(context.Context) error { return nil }); err != nil || len(d.sent) != 1 || d.sent[0].Op != OpMark {
		t.Fatalf("Fence staging nothing: %v, sent %+v, want one OpMark", err, d.sent)
	}
	var nilCtx context.Context
	if err := e.Fence(nilCtx, "r", 4, func(context.Context) error { return nil }); !errors.Is(err, fence.ErrNilArgument) {
		t.Fatalf("nil ctx: %v, want fence.ErrNilArgument", err)
	}
	if err := e.Fence(ctx, "r", 4, nil); !errors.Is(err, fence.ErrNilArgument) {
		t.Fatalf("nil write: %v, want fence.ErrNilArgument", err)
	}
}

// cachedDriver answers ReadAny with a remembered mark (cached) and
// ReadFresh with the store's; it records the reads asked for.
type cachedDriver struct {
	fakeDriver
	remembered, store fence.Claim
	reads             []Read
}

type cachedAttempt struct {
	fakeAttempt
	m      fence.Claim
	cached bool
}

func (a cachedAttempt) Mark() (fence.Claim, bool, bool) { return a.m, true, a.cached }

func (d *cachedDriver) Open(_ context.Context, _ string, read Read) (Attempt, error) {
	d.reads = append(d.reads, read)
	if read == ReadAny {
		return cachedAttempt{fakeAttempt{&d.fakeDriver}, d.remembered, true}, nil
	}
	return cachedAttempt{fakeAttempt{&d.fakeDriver}, d.store, false}, nil
}

// TestRunReadAny: Run decides on a remembered mark when read allows; a
// refusal on it is decided again on a fresh read, and write runs only once
// the claim was admitted. With ReadFresh the remembered mark is never
// asked for.
func TestRunReadAny(t *testing.T) {
	ctx := context.Background()
	c := fence.Claim{Token: 5}
	write := func(ctx context.Context) error { return Stage(ctx, "testguard", Change{Op: OpDelete}) }
	d := &cachedDriver{fakeDriver: fakeDriver{commits: []Result{Committed}}, remembered: fence.Claim{Token: 3}, store: fence.Claim{Token: 4}}
	if err := newEngine(d, 0).Run(ctx, "r", c, ReadAny, write); err != nil || len(d.sent) != 1 || d.sent[0].Op != OpDelete {
		t.Fatalf("admitted on the remembered mark: %v, sent %+v", err, d.sent)
	}
	if len(d.reads) != 1 || d.reads[0] != ReadAny {
		t.Fatalf("reads %v, want the remembered mark alone", d.reads)
	}
	d = &cachedDriver{fakeDriver: fakeDriver{commits: []Result{Committed}}, remembered: fence.Claim{Token: 7}, store: fence.Claim{Token: 4}}
	if err := newEngine(d, 0).Run(ctx, "r", c, ReadAny, write); err != nil || len(d.sent) != 1 {
		t.Fatalf("refused on the remembered mark, admitted on the store's: %v, sent %+v", err, d.sent)
	}
	if len(d.reads) != 2 || d.reads[1] != ReadFresh {
		t.Fatalf("reads %v, want the remembered mark, then a fresh one", d.reads)
	}
	d = &cachedDriver{fakeDriver: fakeDriver{commits: []Result{Committed}}, remembered: fence.Claim{Token: 3}, store: fence.Claim{Token: 9}}
	called := false
	err := newEngine(d, 0).Run(ctx, "r", c, ReadFresh, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, fence.ErrStale) || called || len(d.reads) != 1 || d.reads[0] != ReadFresh {
		t.Fatalf("ReadFresh on a newer mark: %v, write called %v, reads %v", err, called, d.reads)
	}
}

// TestStagerBuildsContent: a guard's staging call finds the call's
// Stager, with the driver of the call (With's), the resource and the
// claim; what build returns (a driver's own Content) reaches Commit as it
// is, and an error of build stages nothing.
func TestStagerBuildsContent(t *testing.T) {
	ctx := context.Background()
	base := newEngine(&fakeDriver{}, 0)
	d := &fakeDriver{commits: []Result{Committed}}
	e := base.With(d)
	if e.Driver != d || base.Driver == Driver(d) || e.Name != base.Name {
		t.Fatalf("With: driver %v (base %v), name %q", e.Driver, base.Driver, e.Name)
	}
	type upload struct{ key string }
	failed := errors.New("upload failed")
	err := e.FenceClaim(ctx, "r", fence.Claim{Token: 6}, func(ctx context.Context) error {
		st, err := StagerOf(ctx, "testguard")
		if err != nil {
			return err
		}
		if st.Driver != d || st.Resource != "r" || st.Claim.Token != 6 || len(st.WriteID) != 32 {
			t.Errorf("stager %+v", st)
		}
		if err := st.Stage(func() (Change, error) { return Change{}, failed }); !errors.Is(err, failed) {
			t.Errorf("failing build: %v", err)
		}
		return st.Stage(func() (Change, error) {
			return Change{Op: OpPut, Content: &upload{st.Resource + "/data"}}, nil
		})
	})
	if err != nil || len(d.sent) != 1 || d.sent[0].Content.(*upload).key != "r/data" {
		t.Fatalf("staged content: %v, sent %+v", err, d.sent)
	}
	if _, err := StagerOf(nil, "testguard"); !errors.Is(err, fence.ErrNoStager) { //nolint:staticcheck // a nil context is the input under test
		t.Fatalf("StagerOf(nil): %v, want fence.ErrNoStager", err)
	}
}

// TestRunSpans: a Fence call is one span: the callback runs under it, and a
// failing callback ends it with its error; a refusal on the first read is
// a span marked not sent, a failure of that read a span with its error.
func TestRunSpans(t *testing.T) {
	spans := obstest.NewSpans(t)
	rec, err := guardobs.New(guardobs.Config{Kind: "test", TracerProvider: spans.Provider})
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller := spans.Start(context.Background(), "caller")
	d := &fakeDriver{commits: []Result{Committed}}
	e := newEngine(d, 0)
	e.Rec = rec
	inner := func(ctx context.Context) error {
		_, sp := spans.Start(ctx, "inner")
		sp.End()
		return nil
	}
	failed := errors.New("callback failed")
	readFailed := errors.New("read failed")
	if err := e.Fence(ctx, "r", 5, inner); err != nil {
		t.Fatal(err)
	}
	if err := e.Fence(ctx, "r", 5, func(context.Context) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("failing callback: %v", err)
	}
	d.mark = fence.Claim{Token: 9}
	if err := e.Fence(ctx, "r", 5, inner); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale: %v", err)
	}
	e.Driver = driverFunc(func() (Attempt, error) { return nil, readFailed })
	if err := e.Fence(ctx, "r", 5, inner); !errors.Is(err, readFailed) {
		t.Fatalf("failing read: %v", err)
	}
	got := spans.Ended("fencekit.guard.write")
	if len(got) != 4 {
		t.Fatalf("%d spans, want 4", len(got))
	}
	for i, want := range []struct{ outcome, notSent string }{
		{"accepted", ""}, {"error", ""}, {"stale", "true"}, {"error", ""},
	} {
		a := obstest.SpanAttrs(got[i])
		if a["fencekit.guard.outcome"] != want.outcome || a["fencekit.guard.before_write"] != want.notSent || !obstest.ChildOf(got[i], caller.SpanContext()) {
			t.Errorf("span %d: %v, want outcome %s, not sent %q, a child of the caller's", i, a, want.outcome, want.notSent)
		}
	}
	if in := spans.Ended("inner"); len(in) != 1 || !obstest.ChildOf(in[0], got[0].SpanContext()) {
		t.Errorf("the callback's span is not a child of the write's")
	}
}

// TestContextErr: once ctx ended, errors match its error, and ErrBusy
// becomes the context's end.
func TestContextErr(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	busy := fmt.Errorf("lost races: %w", fence.ErrBusy)
	if err := ContextErr(ctx, "test", busy); !errors.Is(err, fence.ErrBusy) {
		t.Errorf("live ctx: %v, want the error itself", err)
	}
	cancel()
	err := ContextErr(ctx, "test", busy)
	if !errors.Is(err, context.Canceled) || errors.Is(err, fence.ErrBusy) {
		t.Errorf("ended ctx, busy: %v, want context.Canceled and not ErrBusy", err)
	}
	if ContextErr(ctx, "test", nil) != nil {
		t.Error("nil error made non-nil")
	}
	//nolint:staticcheck // a nil context is the input under test
	if err := ContextErr(nil, "test", busy); err != busy { //nolint:errorlint // the very error, unwrapped
		t.Errorf("nil ctx: %v, want the error itself", err)
	}
}

// cancelAttempt is a fakeAttempt that calls sent after each Commit's
// request went out (before its answer is returned).
type cancelAttempt struct {
	fakeAttempt
	sent func()
}

func (a cancelAttempt) Commit(ctx context.Context, c fence.Claim, ch Change, id string) (Result, error) {
	r, err := a.fakeAttempt.Commit(ctx, c, ch, id)
	a.sent()
	return r, err
}

// TestFenceStage: fence.Stage in a callback stages an OpPut of its value,
// or the change Engine.Bytes builds; fence.StageDelete an OpDelete; a
// context from WithoutStager has nothing to stage into.
func TestFenceStage(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{commits: []Result{Committed}}
	e := newEngine(d, 0)
	stage := func(write func(ctx context.Context) error) Change {
		t.Helper()
		d.sent = nil
		if err := e.FenceClaim(ctx, "r", fence.Claim{Token: 2}, write); err != nil || len(d.sent) != 1 {
			t.Fatalf("FenceClaim: %v, sent %+v", err, d.sent)
		}
		return d.sent[0]
	}
	if ch := stage(func(ctx context.Context) error { return fence.Stage(ctx, []byte("v")) }); ch.Op != OpPut || string(ch.Value) != "v" {
		t.Errorf("fence.Stage staged %+v, want an OpPut of v", ch)
	}
	if ch := stage(fence.StageDelete); ch.Op != OpDelete {
		t.Errorf("fence.StageDelete staged %+v, want an OpDelete", ch)
	}
	type content struct{ resource, value string }
	e.Bytes = func(_ context.Context, st *Stager, value []byte) (Change, error) {
		return Change{Op: OpPut, Content: content{st.Resource, string(value)}}, nil
	}
	if ch := stage(func(ctx context.Context) error { return fence.Stage(ctx, []byte("v")) }); ch.Content != (content{"r", "v"}) || ch.Value != nil {
		t.Errorf("fence.Stage with Engine.Bytes staged %+v, want its content", ch)
	}
	ch := stage(func(ctx context.Context) error {
		hidden := WithoutStager(ctx)
		if err := fence.Stage(hidden, []byte("x")); !errors.Is(err, fence.ErrNoStager) {
			t.Errorf("fence.Stage on WithoutStager's context: %v, want fence.ErrNoStager", err)
		}
		if err := fence.StageDelete(hidden); !errors.Is(err, fence.ErrNoStager) {
			t.Errorf("fence.StageDelete on WithoutStager's context: %v, want fence.ErrNoStager", err)
		}
		return nil
	})
	if ch.Op != OpMark {
		t.Errorf("a callback whose hidden context staged nothing sent %+v, want an OpMark", ch)
	}
}
