package gcsguard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// onlyReader hides every method but Read (no io.ReadSeeker: the Guard reads
// the content into memory).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestPutSizeMismatchWritesNothing: content shorter or longer than the
// declared size is a *fence.SizeError (fence.ErrSizeMismatch), for a reader read into
// memory, a streamed io.ReadSeeker (one-request upload, and a resumable
// upload whose first chunks were already sent) and Stage; nothing is
// written and the mark is not raised.
func TestPutSizeMismatchWritesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	big := strings.Repeat("b", 2*DefaultChunkSize+10)
	cases := []struct {
		name string
		put  func(resource string) error
		size int64
		read int64 // SizeError.Read
	}{
		{"memory short", func(r string) error {
			_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), r, onlyReader{strings.NewReader("abc")}, 4, PutOptions{})
			return err
		}, 4, 3},
		{"memory long", func(r string) error {
			_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), r, onlyReader{strings.NewReader("abcde")}, 4, PutOptions{})
			return err
		}, 4, 5},
		{"stream short", func(r string) error {
			_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), r, strings.NewReader("abc"), 4, PutOptions{})
			return err
		}, 4, 3},
		{"stream long", func(r string) error {
			_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), r, strings.NewReader("abcde"), 4, PutOptions{})
			return err
		}, 4, 5},
		{"stream long, resumable", func(r string) error {
			_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), r, strings.NewReader(big), int64(len(big))-1, PutOptions{})
			return err
		}, int64(len(big)) - 1, int64(len(big))},
		{"stream short, resumable", func(r string) error {
			_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), r, strings.NewReader(big), int64(len(big))+1, PutOptions{})
			return err
		}, int64(len(big)) + 1, int64(len(big))},
		{"ctx form", func(r string) error {
			_, err := s.Put(fence.WithToken(ctx, 3), r, strings.NewReader("abc"), 2, PutOptions{})
			return err
		}, 2, 3},
		{"Stage", func(r string) error {
			return s.Fence(ctx, r, 3, func(ctx context.Context) error {
				return Stage(ctx, strings.NewReader("abc"), 4, PutOptions{})
			})
		}, 4, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resource := "size/" + strings.ReplaceAll(c.name, " ", "-")
			err := c.put(resource)
			if !errors.Is(err, fence.ErrSizeMismatch) {
				t.Fatalf("err = %v, want fence.ErrSizeMismatch", err)
			}
			var se *fence.SizeError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *fence.SizeError", err)
			}
			if want := (fence.SizeError{Source: "gcsguard", Resource: resource, Size: c.size, Read: c.read}); *se != want {
				t.Fatalf("SizeError %+v, want %+v", *se, want)
			}
			if !strings.Contains(err.Error(), resource) {
				t.Fatalf("error %q does not name the resource", err)
			}
			m, err := s.Mark(ctx, resource)
			if err != nil || m != (fence.Claim{}) {
				t.Fatalf("mark after a size mismatch: %+v, %v", m, err)
			}
		})
	}
	if n := objectCount(t, e, s.name); n != 0 {
		t.Fatalf("%d objects after size mismatches", n)
	}
}

// TestPutSizes: content of the declared size, or of unknown size (-1), is
// stored whole, streamed or read into memory, below and above the chunk
// size; Stage and StageBytes likewise.
func TestPutSizes(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	small := "small content"
	big := strings.Repeat("0123456789", (2*DefaultChunkSize+77)/10)
	cases := []struct {
		name, body string
		r          func(string) io.Reader
		size       func(string) int64
	}{
		{"stream known small", small, func(b string) io.Reader { return strings.NewReader(b) }, func(b string) int64 { return int64(len(b)) }},
		{"stream known big", big, func(b string) io.Reader { return strings.NewReader(b) }, func(b string) int64 { return int64(len(b)) }},
		{"stream unknown big", big, func(b string) io.Reader { return strings.NewReader(b) }, func(string) int64 { return -1 }},
		{"memory known big", big, func(b string) io.Reader { return onlyReader{strings.NewReader(b)} }, func(b string) int64 { return int64(len(b)) }},
		{"memory unknown small", small, func(b string) io.Reader { return onlyReader{strings.NewReader(b)} }, func(string) int64 { return -1 }},
		{"empty", "", func(b string) io.Reader { return strings.NewReader(b) }, func(string) int64 { return 0 }},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resource := "sizes/" + strings.ReplaceAll(c.name, " ", "-")
			info, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, fence.Token(i+1))), resource, c.r(c.body), c.size(c.body), PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if info.Size != int64(len(c.body)) || info.Resource != resource {
				t.Fatalf("info %+v, want size %d of %q", info, len(c.body), resource)
			}
			got, _, err := s.GetBytes(ctx, resource)
			if err != nil || !bytes.Equal(got, []byte(c.body)) {
				t.Fatalf("read back %d bytes (err %v), want %d", len(got), err, len(c.body))
			}
		})
	}
	t.Run("Stage", func(t *testing.T) {
		for i, size := range []int64{int64(len(small)), -1} {
			err := s.Fence(ctx, "sizes/stage", fence.Token(i+1), func(ctx context.Context) error {
				return Stage(ctx, onlyReader{strings.NewReader(small)}, size, PutOptions{})
			})
			if err != nil {
				t.Fatalf("size %d: %v", size, err)
			}
		}
		got, info, err := s.GetBytes(ctx, "sizes/stage")
		if err != nil || string(got) != small || info.Token != 2 {
			t.Fatalf("read back %q, %+v, %v", got, info, err)
		}
	})
}

// The buffer of an upload of known size below the chunk size fits the
// content (rounded up to 256 KiB, above the size so the upload stays one
// request); unknown or larger sizes keep Config.ChunkSize.
func TestChunkFor(t *testing.T) {
	s := &Guard{chunk: 4 << 20}
	const unit = 256 << 10
	for _, c := range []struct {
		size int64
		want int
	}{
		{-1, 4 << 20}, {0, unit}, {1, unit}, {unit - 1, unit}, {unit, 2 * unit},
		{4<<20 - 1, 4 << 20}, {4 << 20, 4 << 20}, {1 << 40, 4 << 20},
	} {
		if got := s.chunkFor(c.size); got != c.want {
			t.Errorf("chunkFor(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}
