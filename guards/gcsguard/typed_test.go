package gcsguard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/fencekit/fencekit/fence"
)

// TestLostReplyOvertakenNoLibraryRetry: the upload lands, its reply is
// lost, the library does not retry, and a newer holder writes before the
// Guard's settling read. The read finds the newer generation, so the
// upload can no longer land: the write is reported as a *fence.StaleError
// with Overtaken set, not as an unknown outcome.
func TestLostReplyOvertakenNoLibraryRetry(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	c := e.client(t)
	c.SetRetry(storage.WithPolicy(storage.RetryNever))
	s := e.store(t, "", Config{Client: c})
	const key = "lost/overtaken-noretry"
	if _, err := s.PutClaim(ctx, key, fence.ClaimFor(ctx, 7), strings.NewReader("seven"), int64(len("seven")), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	loseFirstUpload(e, func() {
		for now := time.Now().UnixMicro(); time.Now().UnixMicro() <= now; {
			// spin: the emulator's generations are microseconds
		}
		e.srv.CreateObject(fakestorage.Object{
			ObjectAttrs: fakestorage.ObjectAttrs{BucketName: s.Bucket(), Name: key,
				Metadata: map[string]string{MetaToken: "9", MetaWriteID: strings.Repeat("ab", 16)}},
			Content: []byte("nine"),
		})
	})
	_, err := s.PutClaim(ctx, key, fence.ClaimFor(ctx, 8), strings.NewReader("eight"), int64(len("eight")), PutOptions{})
	e.setFault(nil)
	se, ok := fence.IsStale(err)
	if !ok || se.Presented != 8 || se.Highest != 9 || !se.Overtaken || errors.Is(err, fence.ErrOutcomeUnknown) {
		t.Fatalf("landed, reply lost, overtaken before the settling read: %v, want StaleError{8, 9} with Overtaken", err)
	}
}

// TestNotFoundMatchesFence: a read of a resource without content matches
// fence.ErrNotFound as well as gcsguard.ErrNotFound.
func TestNotFoundMatchesFence(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	if _, err := s.DeleteClaim(ctx, "nf/deleted", fence.Claim{Token: 2}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"nf/never", "nf/deleted"} {
		_, _, err := s.GetBytes(ctx, r)
		if !errors.Is(err, fence.ErrNotFound) || !errors.Is(err, ErrNotFound) {
			t.Errorf("GetBytes(%q): %v, want fence.ErrNotFound and gcsguard.ErrNotFound", r, err)
		}
		if _, err := s.Stat(ctx, r); !errors.Is(err, fence.ErrNotFound) {
			t.Errorf("Stat(%q): %v, want fence.ErrNotFound", r, err)
		}
	}
}

// TestNilContext: every call given a nil context returns ErrNilContext
// instead of panicking, and writes nothing.
func TestNilContext(t *testing.T) {
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	c := fence.Claim{Token: 1}
	write := func(context.Context) error { t.Error("Fence ran its write with a nil context"); return nil }
	//nolint:staticcheck // a nil context is the input under test
	calls := map[string]func() error{
		"Put":           func() error { _, err := s.PutBytes(nil, "nil/ctx", []byte("v"), PutOptions{}); return err },
		"PutBytesClaim": func() error { _, err := s.PutBytesClaim(nil, "nil/ctx", c, []byte("v"), PutOptions{}); return err },
		"Delete":        func() error { _, err := s.Delete(nil, "nil/ctx"); return err },
		"DeleteClaim":   func() error { _, err := s.DeleteClaim(nil, "nil/ctx", c); return err },
		"Get":           func() error { _, _, err := s.Get(nil, "nil/ctx"); return err },
		"GetBytes":      func() error { _, _, err := s.GetBytes(nil, "nil/ctx"); return err },
		"Stat":          func() error { _, err := s.Stat(nil, "nil/ctx"); return err },
		"Mark":          func() error { _, err := s.Mark(nil, "nil/ctx"); return err },
		"Fence":         func() error { return s.Fence(nil, "nil/ctx", 1, write) },
		"Do":            func() error { return s.Do(nil, "nil/ctx", write) },
	}
	for name, call := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s(nil ctx) panicked: %v", name, r)
				}
			}()
			if err := call(); !errors.Is(err, ErrNilContext) {
				t.Errorf("%s(nil ctx): %v, want ErrNilContext", name, err)
			}
		}()
	}
	if _, err := s.Stat(context.Background(), "nil/ctx"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after calls with a nil ctx: Stat %v, want not found (nothing written)", err)
	}
}
