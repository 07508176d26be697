package gcsguard

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/fencekit/fencekit/fence"
)

func objectCount(t *testing.T, e *emulator, bucket string) int {
	t.Helper()
	res, err := e.srv.ListObjectsWithOptionsPaginated(bucket, fakestorage.ListOptions{}) // no MaxResults: one page
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Objects)
}

func TestNewConfig(t *testing.T) {
	e := newEmulator(t)
	c := e.client(t)
	for _, cfg := range []Config{
		{Bucket: "b"},
		{Client: c},
		{Client: c, Bucket: "b", MaxAttempts: -1},
		{Client: c, Bucket: "b", ChunkSize: 1000},
		{Client: c, Bucket: "b", ChunkSize: -256 << 10},
	} {
		if _, err := New(cfg); !errors.Is(err, fence.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want fence.ErrInvalidConfig", cfg, err)
		}
	}
}

// TestBadInputWritesNothing: every refused call leaves the bucket empty.
func TestBadInputWritesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	ok := fence.Claim{Token: 5}
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"no token in ctx", func() error { _, err := s.PutBytes(ctx, "k", []byte("x"), PutOptions{}); return err }, fence.ErrNoToken},
		{"no token in ctx, delete", func() error { _, err := s.Delete(ctx, "k"); return err }, fence.ErrNoToken},
		{"token 0", func() error {
			_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 0)), "k", strings.NewReader("x"), int64(len("x")), PutOptions{})
			return err
		}, fence.ErrInvalidToken},
		{"bad run", func() error {
			_, err := s.Put(fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "a b"}), "k", strings.NewReader("x"), int64(len("x")), PutOptions{})
			return err
		}, fence.ErrInvalidRun},
		{"only spaces", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "   ", strings.NewReader("x"), int64(len("x")), PutOptions{})
			return err
		}, fence.ErrInvalidResource},
		{"dot", func() error { _, err := s.Delete(fence.WithClaim(ctx, ok), "."); return err }, fence.ErrInvalidResource},
		{"newline", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "a\nb", strings.NewReader("x"), int64(len("x")), PutOptions{})
			return err
		}, fence.ErrInvalidResource},
		{"acme", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), ".well-known/acme-challenge/t", strings.NewReader("x"), int64(len("x")), PutOptions{})
			return err
		}, fence.ErrInvalidResource},
		{"reserved metadata key", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "k", strings.NewReader("x"), int64(len("x")), PutOptions{Metadata: map[string]string{"Fencekit-Token": "9"}})
			return err
		}, ErrInvalidOptions},
		{"metadata key charset", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "k", strings.NewReader("x"), int64(len("x")), PutOptions{Metadata: map[string]string{"a b": "v"}})
			return err
		}, ErrInvalidOptions},
		{"metadata value control", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "k", strings.NewReader("x"), int64(len("x")), PutOptions{Metadata: map[string]string{"k": "a\nb"}})
			return err
		}, ErrInvalidOptions},
		{"metadata too large", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "k", strings.NewReader("x"), int64(len("x")), PutOptions{Metadata: map[string]string{"k": strings.Repeat("v", MaxMetadataSize)}})
			return err
		}, ErrInvalidOptions},
		{"content type control", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "k", strings.NewReader("x"), int64(len("x")), PutOptions{ContentType: "text/plain\r\nX: y"})
			return err
		}, ErrInvalidOptions},
		{"nil reader", func() error { _, err := s.Put(fence.WithClaim(ctx, ok), "k", nil, -1, PutOptions{}); return err }, ErrInvalidOptions},
		{"size below -1", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "k", strings.NewReader("x"), -2, PutOptions{})
			return err
		}, ErrInvalidOptions},
		{"size mismatch, short", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "k", strings.NewReader("x"), 2, PutOptions{})
			return err
		}, fence.ErrSizeMismatch},
		{"nil write", func() error { return s.Fence(ctx, "k", 5, nil) }, fence.ErrNilArgument},
		{"Do without a claim", func() error {
			return s.Do(ctx, "k", func(context.Context) error { t.Error("Do called write without a claim"); return nil })
		}, fence.ErrNoToken},
		{"failing reader", func() error {
			_, err := s.Put(fence.WithClaim(ctx, ok), "k", io.MultiReader(strings.NewReader("part"), errReader{}), -1, PutOptions{})
			return err
		}, errBroken},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrBusy) {
			t.Errorf("%s: %v also matches stale or busy", c.name, err)
		}
	}
	if n := objectCount(t, e, s.name); n != 0 {
		t.Fatalf("%d objects after refused calls", n)
	}
}

var errBroken = errors.New("broken reader")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBroken }

// TestFailingSeekerWritesNothing: a streamed body that fails midway
// aborts the upload: nothing is committed, the mark is not raised.
func TestFailingSeekerWritesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	big := strings.Repeat("x", 3*DefaultChunkSize)
	r := &failAt{r: strings.NewReader(big), at: 2 * DefaultChunkSize}
	_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 4)), "stream", r, int64(len(big)), PutOptions{})
	if !errors.Is(err, errBroken) {
		t.Fatalf("failing stream: %v", err)
	}
	if n := objectCount(t, e, s.name); n != 0 {
		t.Fatalf("%d objects after a failed stream", n)
	}
}

type failAt struct {
	r  *strings.Reader
	at int64
}

func (f *failAt) Read(p []byte) (int, error) {
	pos, _ := f.r.Seek(0, io.SeekCurrent)
	if pos >= f.at {
		return 0, errBroken
	}
	return f.r.Read(p[:min(int64(len(p)), f.at-pos)])
}

func (f *failAt) Seek(off int64, whence int) (int64, error) { return f.r.Seek(off, whence) }

// TestForeignObjects: objects at a key that gcsguard did not write (or
// whose metadata is garbage) are refused by every call and never
// overwritten.
func TestForeignObjects(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	id := strings.Repeat("0f", 16)
	cases := map[string]map[string]string{
		"plain":         nil,
		"token garbage": {MetaToken: "abc", MetaWriteID: id},
		"token zero":    {MetaToken: "0", MetaWriteID: id},
		"token sign":    {MetaToken: "-3", MetaWriteID: id},
		"token padded":  {MetaToken: "007", MetaWriteID: id},
		"run garbage":   {MetaToken: "3", MetaRun: "a b", MetaWriteID: id},
		"run empty":     {MetaToken: "3", MetaRun: "", MetaWriteID: id},
		"no write id":   {MetaToken: "3"},
		"bad write id":  {MetaToken: "3", MetaWriteID: "xyz"},
		"deleted maybe": {MetaToken: "3", MetaWriteID: id, MetaDeleted: "yes"},
	}
	for name, md := range cases {
		key := "foreign/" + strings.ReplaceAll(name, " ", "-")
		e.srv.CreateObject(fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: s.name, Name: key, Metadata: md}, Content: []byte("theirs")})
		before, err := e.srv.GetObject(s.name, key)
		if err != nil {
			t.Fatal(err)
		}
		var errs []error
		_, err = s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 99)), key, strings.NewReader("ours"), int64(len("ours")), PutOptions{})
		errs = append(errs, err)
		_, err = s.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 99)), key)
		errs = append(errs, err)
		errs = append(errs, s.Fence(ctx, key, 99, func(context.Context) error { return nil }))
		_, _, err = s.GetBytes(ctx, key)
		errs = append(errs, err)
		_, err = s.Mark(ctx, key)
		errs = append(errs, err)
		for i, err := range errs {
			var oe *fence.ForeignError
			if !errors.As(err, &oe) || !errors.Is(err, fence.ErrForeign) || oe.Resource != key {
				t.Errorf("%s: call %d: %v, want *fence.ForeignError", name, i, err)
			}
		}
		after, err := e.srv.GetObject(s.name, key)
		if err != nil || after.Generation != before.Generation || string(after.Content) != "theirs" {
			t.Errorf("%s: object changed: generation %d -> %d, %q", name, before.Generation, after.Generation, after.Content)
		}
	}
}

// TestEndedContext: a call under an ended context returns the cause and
// never ErrBusy, and writes nothing.
func TestEndedContext(t *testing.T) {
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	cause := errors.New("lease lost (test)")
	ctx, cancel := context.WithCancelCause(fence.WithClaim(context.Background(), fence.Claim{Token: 3}))
	cancel(cause)
	_, err1 := s.PutBytes(ctx, "ended", []byte("x"), PutOptions{})
	_, err2 := s.Delete(ctx, "ended")
	_, _, err3 := s.GetBytes(ctx, "ended")
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) || errors.Is(err, fence.ErrBusy) {
			t.Errorf("call %d: %v, want context.Canceled and the cause", i, err)
		}
	}
	if n := objectCount(t, e, s.name); n != 0 {
		t.Fatalf("%d objects written under an ended context", n)
	}
}

// TestContextEndsDuringWrite: the context ends while a write is deciding
// (after a read), once on the first decision and once while the last
// allowed attempt is being retried after a lost race; the write reports the
// context's end with its cause, never ErrBusy, and the stale refusal keeps
// matching ErrStale.
func TestContextEndsDuringWrite(t *testing.T) {
	e := newEmulator(t)
	bucket := e.bucket(t)
	other := e.store(t, bucket, Config{})
	cause := errors.New("lease lost (test)")
	seed := func(t *testing.T, key string, tok fence.Token) {
		t.Helper()
		if _, err := other.PutBytes(fence.WithClaim(context.Background(), fence.ClaimFor(context.Background(), tok)), key, []byte("seed"), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, err error, alsoStale bool) {
		t.Helper()
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) || errors.Is(err, fence.ErrBusy) {
			t.Errorf("%v, want context.Canceled and the cause, not ErrBusy", err)
		}
		if alsoStale != errors.Is(err, fence.ErrStale) {
			t.Errorf("%v: matches ErrStale %v, want %v", err, !alsoStale, alsoStale)
		}
	}

	t.Run("lost race on the last attempt", func(t *testing.T) {
		const key = "ends/busy"
		seed(t, key, 1)
		s := e.store(t, bucket, Config{MaxAttempts: 1})
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		reads := 0
		s.afterRead = func(string) {
			switch reads++; reads {
			case 1: // another writer wins the race: our write meets 412
				seed(t, key, 2)
			case 2: // the re-read admits us again; the context ends now
				cancel(cause)
			}
		}
		_, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), key, []byte("x"), PutOptions{})
		if reads != 2 {
			t.Fatalf("%d reads, want 2", reads)
		}
		check(t, err, false)
	})
	t.Run("stale decision", func(t *testing.T) {
		const key = "ends/stale"
		seed(t, key, 5)
		s := e.store(t, bucket, Config{})
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		s.afterRead = func(string) { cancel(cause) }
		_, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 4)), key, []byte("x"), PutOptions{})
		check(t, err, true)
	})
}

func TestStageMisuse(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	if err := StageBytes(ctx, nil, PutOptions{}); !errors.Is(err, fence.ErrNoStager) {
		t.Fatalf("Stage outside Fence: %v", err)
	}
	var kept context.Context
	err := s.Fence(ctx, "stage", 2, func(ctx context.Context) error {
		kept = ctx
		if err := StageBytes(ctx, []byte("one"), PutOptions{}); err != nil {
			return err
		}
		if err := StageDelete(ctx); !errors.Is(err, fence.ErrAlreadyStaged) {
			t.Errorf("second Stage: %v", err)
		}
		if c, err := fence.ClaimFromContext(ctx); err != nil || c.Token != 2 {
			t.Errorf("claim in the write's ctx: %+v %v", c, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := StageBytes(kept, []byte("late"), PutOptions{}); !errors.Is(err, fence.ErrStageClosed) {
		t.Fatalf("Stage after Fence returned: %v", err)
	}
	if b, _, err := s.GetBytes(ctx, "stage"); err != nil || string(b) != "one" {
		t.Fatalf("staged content: %q %v", b, err)
	}
}

// TestFenceStageGeneric: fence.Stage, called by code that knows only
// fence.Guard, stages into the running callback as StageBytes does with
// zero PutOptions, and fence.StageDelete as StageDelete does.
func TestFenceStageGeneric(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	var g fence.Guard = s
	if err := s.Fence(ctx, "bytes", 1, func(ctx context.Context) error {
		return StageBytes(ctx, []byte("generic"), PutOptions{})
	}); err != nil {
		t.Fatal(err)
	}
	if err := g.Fence(ctx, "generic", 1, func(ctx context.Context) error {
		if err := fence.Stage(ctx, []byte("generic")); err != nil {
			return err
		}
		if err := fence.Stage(ctx, []byte("again")); !errors.Is(err, fence.ErrAlreadyStaged) {
			t.Errorf("second fence.Stage: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, want, err := s.GetBytes(ctx, "bytes")
	if err != nil {
		t.Fatal(err)
	}
	b, got, err := s.GetBytes(ctx, "generic")
	if err != nil || string(b) != "generic" {
		t.Fatalf("fence.Stage's content: %q %v", b, err)
	}
	if got.Size != want.Size || got.ContentType != want.ContentType || len(got.Metadata) != len(want.Metadata) || got.Token != 1 {
		t.Errorf("fence.Stage's info %+v, StageBytes's %+v", got, want)
	}
	if err := g.Fence(ctx, "generic", 2, fence.StageDelete); err != nil {
		t.Fatal(err)
	}
	var nf *fence.NotFoundError
	if _, _, err := s.GetBytes(ctx, "generic"); !errors.As(err, &nf) || nf.Token != 2 {
		t.Errorf("after fence.StageDelete: %v, want a *fence.NotFoundError with token 2", err)
	}
}
