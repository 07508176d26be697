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
	"github.com/fencekit/fencekit/guards/internal/objtest"
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
	if _, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 7)), key, strings.NewReader("seven"), int64(len("seven")), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	loseFirstUpload(e, func() {
		for now := time.Now().UnixMicro(); time.Now().UnixMicro() <= now; {
			// spin: the emulator's generations are microseconds
		}
		e.srv.CreateObject(fakestorage.Object{
			ObjectAttrs: fakestorage.ObjectAttrs{BucketName: s.name, Name: key,
				Metadata: map[string]string{MetaToken: "9", MetaWriteID: strings.Repeat("ab", 16)}},
			Content: []byte("nine"),
		})
	})
	_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 8)), key, strings.NewReader("eight"), int64(len("eight")), PutOptions{})
	e.setFault(nil)
	se, ok := fence.IsStale(err)
	if !ok || se.Presented != 8 || se.Highest != 9 || !se.Overtaken || errors.Is(err, fence.ErrOutcomeUnknown) {
		t.Fatalf("landed, reply lost, overtaken before the settling read: %v, want StaleError{8, 9} with Overtaken", err)
	}
}

var _ objtest.Guard[PutOptions, Info] = (*Guard)(nil)

// TestNotFoundMatchesFence: a read (GetBytes, Stat) of a resource without
// content matches fence.ErrNotFound.
func TestNotFoundMatchesFence(t *testing.T) {
	s := newEmulator(t).store(t, "", Config{})
	if err := objtest.CheckNotFound(context.Background(), s, nil); err != nil {
		t.Error(err)
	}
}

// TestNilContext: every call given a nil context returns fence.ErrNilArgument
// instead of panicking, and writes nothing.
func TestNilContext(t *testing.T) {
	s := newEmulator(t).store(t, "", Config{})
	write := func(context.Context) error { t.Error("Fence ran its write with a nil context"); return nil }
	calls := objtest.NilContextCalls(s, "nil/ctx", write)
	if err := objtest.CheckNilContext(calls); err != nil {
		t.Error(err)
	}
	if _, err := s.Stat(context.Background(), "nil/ctx"); !errors.Is(err, fence.ErrNotFound) {
		t.Errorf("after calls with a nil ctx: Stat %v, want not found (nothing written)", err)
	}
}
