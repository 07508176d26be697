package objstage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// mismatch is the Mismatch of the tests: it reports both numbers.
func mismatch(size, read int64) error { return fmt.Errorf("size %d read %d", size, read) }

// TestSeekLen: an io.Seeker's remaining length is measured from its
// current offset and the offset is restored; a reader that is not an
// io.Seeker, or cannot seek, is not measured.
func TestSeekLen(t *testing.T) {
	r := strings.NewReader("0123456789")
	if _, err := r.Seek(3, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	n, ok, err := SeekLen(r)
	if err != nil || !ok || n != 7 {
		t.Fatalf("SeekLen at 3 of 10: %d %v %v, want 7 true nil", n, ok, err)
	}
	if pos, _ := r.Seek(0, io.SeekCurrent); pos != 3 {
		t.Errorf("offset after SeekLen: %d, want 3", pos)
	}
	for name, r := range map[string]io.Reader{"not a seeker": readOnly{r}, "cannot seek": noSeek{}} {
		if _, ok, err := SeekLen(r); ok || err != nil {
			t.Errorf("%s: measured %v, err %v; want false, nil", name, ok, err)
		}
	}
}

// readOnly hides every method but Read.
type readOnly struct{ r io.Reader }

func (o readOnly) Read(p []byte) (int, error) { return o.r.Read(p) }

// noSeek is an io.ReadSeeker whose Seek always fails (a pipe).
type noSeek struct{}

func (noSeek) Read([]byte) (int, error)       { return 0, io.EOF }
func (noSeek) Seek(int64, int) (int64, error) { return 0, errors.New("illegal seek") }

// TestSizedReader: exactly Size bytes pass; content that ends early or
// goes on fails with the Mismatch's error (Read, then End), which is kept.
func TestSizedReader(t *testing.T) {
	for _, tc := range []struct {
		content string
		size    int64
		want    string // "" for no mismatch
	}{
		{"abcd", 4, ""},
		{"", 0, ""},
		{"abc", 4, "size 4 read 3"},
		{"abcde", 4, "size 4 read 5"},
		{"a", 0, "size 0 read 1"},
		{"abc", math.MaxInt64, fmt.Sprintf("size %d read 3", int64(math.MaxInt64))},
	} {
		s := &SizedReader{R: strings.NewReader(tc.content), Size: tc.size, Mismatch: mismatch}
		_, rerr := io.ReadAll(s)
		err := s.End()
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%q as %d bytes: End %q, want %q", tc.content, tc.size, got, tc.want)
		}
		if tc.want != "" && (rerr == nil || s.Err() == nil || s.Err().Error() != tc.want) {
			t.Errorf("%q as %d bytes: Read error %v, Err %v; want the mismatch from both", tc.content, tc.size, rerr, s.Err())
		}
	}
	var nilReader *SizedReader
	if nilReader.End() != nil || nilReader.Err() != nil {
		t.Error("a nil SizedReader reports a mismatch")
	}
}

// TestReadSized: a known size is checked, an unknown one (-1) reads all;
// read errors are wrapped.
func TestReadSized(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("wrapped: %w", err) }
	if b, err := ReadSized(strings.NewReader("abc"), 3, mismatch, wrap); err != nil || string(b) != "abc" {
		t.Errorf("3 of 3: %q %v", b, err)
	}
	if b, err := ReadSized(strings.NewReader("abcdef"), -1, mismatch, wrap); err != nil || string(b) != "abcdef" {
		t.Errorf("unknown size: %q %v", b, err)
	}
	if _, err := ReadSized(strings.NewReader("abcdef"), 3, mismatch, wrap); err == nil || err.Error() != "size 3 read 4" {
		t.Errorf("6 as 3: %v, want size 3 read 4", err)
	}
	if _, err := ReadSized(strings.NewReader("ab"), 3, mismatch, wrap); err == nil || err.Error() != "size 3 read 2" {
		t.Errorf("2 as 3: %v, want size 3 read 2", err)
	}
	broken := errors.New("broken")
	if _, err := ReadSized(io.MultiReader(strings.NewReader("a"), errReader{broken}), 3, mismatch, wrap); !errors.Is(err, broken) || !strings.HasPrefix(err.Error(), "wrapped: ") {
		t.Errorf("failing reader: %v, want it wrapped", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestCheckBody: a size below -1 and a nil reader are refused.
func TestCheckBody(t *testing.T) {
	invalid := errors.New("invalid")
	r := strings.NewReader("")
	for _, tc := range []struct {
		r    io.Reader
		size int64
		ok   bool
	}{{r, -1, true}, {r, 0, true}, {r, -2, false}, {nil, 0, false}} {
		if err := CheckBody(tc.r, tc.size, invalid); (err == nil) != tc.ok || (err != nil && !errors.Is(err, invalid)) {
			t.Errorf("CheckBody(%v, %d): %v", tc.r, tc.size, err)
		}
	}
}

// TestWriteID: fresh ids are valid and differ; others are refused.
func TestWriteID(t *testing.T) {
	a, b := NewWriteID(), NewWriteID()
	if !IsWriteID(a) || !IsWriteID(b) || a == b {
		t.Fatalf("NewWriteID: %q %q", a, b)
	}
	for _, bad := range []string{"", strings.ToUpper(a), a[1:], a + "0", strings.Repeat("g", WriteIDLen)} {
		if IsWriteID(bad) {
			t.Errorf("IsWriteID(%q) = true", bad)
		}
	}
}

// memWriter is a Writer over one in-memory mark and value.
func memWriter(mark *fence.Token, value *string, commits *int) *Writer[fence.Token, string, fence.Token] {
	return &Writer[fence.Token, string, fence.Token]{
		Owner: "owner",
		Args: &engine.Args{Name: "test", Resource: func(r string) error {
			if r == "" {
				return &fence.ResourceError{Resource: r, Reason: "empty"}
			}
			return nil
		}},
		Decide: func(_ context.Context, r string, c fence.Claim, _ bool) (fence.Token, error) {
			return *mark, fence.Decide(r, c.Token, *mark)
		},
		Commit: func(_ context.Context, _ string, c fence.Claim, _ string, ch string, _ fence.Token) (fence.Token, error) {
			*commits++
			*mark = c.Token
			if ch != "" {
				*value = ch
			}
			return c.Token, nil
		},
	}
}

// TestWriterRun: the callback runs after the decision with a stager of
// its own that takes one change and none after Run returned; refusals and
// a failing callback commit nothing.
func TestWriterRun(t *testing.T) {
	ctx := context.Background()
	mark, value, commits := fence.Token(0), "", 0
	w := memWriter(&mark, &value, &commits)
	var kept *Stager[string]
	tok, err := w.Run(ctx, "r", fence.Claim{Token: 5}, func(ctx context.Context) error {
		st, err := From[string](ctx)
		if err != nil {
			return err
		}
		kept = st
		if st.Owner != "owner" || st.Resource != "r" || st.Claim.Token != 5 || !IsWriteID(st.WriteID) {
			t.Errorf("stager %+v", st)
		}
		if err := st.Stage(func() (string, error) { return "v5", nil }); err != nil {
			return err
		}
		if err := st.Stage(func() (string, error) { return "again", nil }); !errors.Is(err, fence.ErrAlreadyStaged) {
			t.Errorf("second Stage: %v, want AlreadyStaged", err)
		}
		return nil
	}, false)
	if err != nil || tok != 5 || value != "v5" || commits != 1 {
		t.Fatalf("Run: %d %v, value %q, commits %d", tok, err, value, commits)
	}
	if err := kept.Stage(func() (string, error) { return "late", nil }); !errors.Is(err, fence.ErrStageClosed) {
		t.Errorf("Stage after Run returned: %v, want Closed", err)
	}
	if _, err := From[string](ctx); !errors.Is(err, fence.ErrNoStager) {
		t.Errorf("From outside a callback: %v, want NoStager", err)
	}
	if _, err := From[int](context.WithValue(ctx, stagerKey{}, kept)); !errors.Is(err, fence.ErrNoStager) {
		t.Errorf("From of another change type: %v, want NoStager", err)
	}
	called := false
	write := func(context.Context) error { called = true; return nil }
	_, err = w.Run(ctx, "r", fence.Claim{Token: 4}, write, false)
	if !errors.Is(err, fence.ErrStale) || called {
		t.Errorf("stale: %v, called %v", err, called)
	}
	for name, tc := range map[string]struct {
		run  func() error
		want error
	}{
		"bad resource": {func() error { _, err := w.Run(ctx, "", fence.Claim{Token: 6}, write, false); return err }, fence.ErrInvalidResource},
		"bad token":    {func() error { _, err := w.Run(ctx, "r", fence.Claim{}, write, false); return err }, fence.ErrInvalidToken},
		"nil write":    {func() error { _, err := w.Run(ctx, "r", fence.Claim{Token: 6}, nil, false); return err }, fence.ErrNilArgument},
		//nolint:staticcheck // a nil context is the input under test
		"nil context": {func() error { _, err := w.Run(nil, "r", fence.Claim{Token: 6}, write, false); return err }, fence.ErrNilArgument},
	} {
		if err := tc.run(); !errors.Is(err, tc.want) || called {
			t.Errorf("%s: %v, called %v; want %v", name, err, called, tc.want)
		}
	}
	//nolint:staticcheck // a nil context is the input under test
	if _, err := w.Claim(nil, "r"); !errors.Is(err, fence.ErrNilArgument) {
		t.Errorf("Claim(nil ctx): %v, want fence.ErrNilArgument", err)
	}
	failed := errors.New("callback failed")
	var discarded string
	w.Discard = func(_ context.Context, ch string) { discarded = ch }
	_, err = w.Run(ctx, "r", fence.Claim{Token: 7}, func(ctx context.Context) error {
		st, _ := From[string](ctx)
		_ = st.Stage(func() (string, error) { return "v7", nil })
		return failed
	}, false)
	if !errors.Is(err, failed) || discarded != "v7" || mark != 5 || commits != 1 {
		t.Errorf("failing callback: %v, discarded %q, mark %d, commits %d", err, discarded, mark, commits)
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
}

// TestWriterRunEndedContext: once ctx has ended, a refusal of the
// arguments matches ctx's error as well as its own, and nothing runs.
func TestWriterRunEndedContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mark, value, commits := fence.Token(0), "", 0
	w := memWriter(&mark, &value, &commits)
	called := false
	write := func(context.Context) error { called = true; return nil }
	_, err := w.Run(ctx, "", fence.Claim{Token: 5}, write, false)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, fence.ErrInvalidResource) || called {
		t.Errorf("bad resource, ended ctx: %v, called %v; want context.Canceled and fence.ErrInvalidResource", err, called)
	}
	_, err = w.Run(ctx, "r", fence.Claim{Token: 5}, write, false)
	if !errors.Is(err, context.Canceled) || called || commits != 0 {
		t.Errorf("ended ctx: %v, called %v, commits %d; want context.Canceled and nothing run", err, called, commits)
	}
}
