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

// TestWriteID: fresh ids (engine.NewWriteID) are valid and differ; others are refused.
func TestWriteID(t *testing.T) {
	a, b := engine.NewWriteID(), engine.NewWriteID()
	if !IsWriteID(a) || !IsWriteID(b) || a == b {
		t.Fatalf("engine.NewWriteID: %q %q", a, b)
	}
	for _, bad := range []string{"", strings.ToUpper(a), a[1:], a + "0", strings.Repeat("g", WriteIDLen)} {
		if IsWriteID(bad) {
			t.Errorf("IsWriteID(%q) = true", bad)
		}
	}
}

// memDriver is an engine.Driver over one in-memory mark: every commit is
// applied and kept.
type memDriver struct {
	mark    fence.Token
	commits []engine.Change
}

func (d *memDriver) Open(context.Context, string, engine.Read) (engine.Attempt, error) {
	return d, nil
}
func (d *memDriver) Mark() (fence.Claim, bool, bool) { return fence.Claim{Token: d.mark}, true, false }
func (d *memDriver) Close()                          {}
func (d *memDriver) Commit(_ context.Context, c fence.Claim, ch engine.Change, _ string) (engine.Result, error) {
	d.mark = c.Token
	d.commits = append(d.commits, ch)
	return engine.Committed, nil
}
func (d *memDriver) Settle(context.Context, fence.Claim, engine.Change, string, error) (engine.Result, error) {
	return engine.Failed, errors.New("no lost replies here")
}

// TestStageContent: the guard's options and the body are checked before
// build runs under the call's engine.Stager; outside a callback there is
// no stager, and one change is staged at most.
func TestStageContent(t *testing.T) {
	ctx := context.Background()
	invalid := errors.New("invalid")
	build := func(st *engine.Stager) (engine.Change, error) {
		b, err := io.ReadAll(strings.NewReader(st.Resource))
		return engine.Change{Op: engine.OpPut, Value: b}, err
	}
	r := strings.NewReader("x")
	if err := StageContent(ctx, "test", nil, r, 1, invalid, build); !errors.Is(err, fence.ErrNoStager) {
		t.Fatalf("outside a callback: %v, want fence.ErrNoStager", err)
	}
	d := &memDriver{}
	e := &engine.Engine{Args: engine.Args{Name: "test"}, Driver: d, Op: "test: write"}
	optsErr := errors.New("bad options")
	err := e.FenceClaim(ctx, "r", fence.Claim{Token: 3}, func(ctx context.Context) error {
		for name, tc := range map[string]struct {
			opts error
			r    io.Reader
			size int64
			want error
		}{
			"options": {optsErr, r, 1, optsErr}, "size": {nil, r, -2, invalid}, "nil reader": {nil, nil, 1, invalid},
		} {
			if err := StageContent(ctx, "test", tc.opts, tc.r, tc.size, invalid, build); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", name, err, tc.want)
			}
		}
		if err := StageContent(ctx, "other", nil, r, 1, invalid, build); !errors.Is(err, fence.ErrNoStager) {
			t.Errorf("another guard's Stage: %v, want fence.ErrNoStager", err)
		}
		if err := StageContent(ctx, "test", nil, r, 1, invalid, build); err != nil {
			return err
		}
		return StageContent(ctx, "test", nil, r, 1, invalid, build)
	})
	if !errors.Is(err, fence.ErrAlreadyStaged) || len(d.commits) != 0 {
		t.Fatalf("second change: %v, %d commits; want fence.ErrAlreadyStaged and none", err, len(d.commits))
	}
	if err := e.FenceClaim(ctx, "r", fence.Claim{Token: 3}, func(ctx context.Context) error {
		return StageContent(ctx, "test", nil, r, 1, invalid, build)
	}); err != nil || len(d.commits) != 1 || string(d.commits[0].Value) != "r" {
		t.Fatalf("staged: %v, commits %+v", err, d.commits)
	}
}
