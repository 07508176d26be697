package natsguard

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/fence"
)

// TestNotFoundMatchesFence: a read of a resource without value matches
// fence.ErrNotFound as well as the guard's own fence.ErrNotFound, whether the
// key was never written or holds a tombstone.
func TestNotFoundMatchesFence(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t, jetstreamKV(0))
	g := guard(t, bucket, Config{})
	if err := g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 2}), "nf/deleted"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"nf/never", "nf/deleted"} {
		_, _, err := g.Get(ctx, r)
		if !errors.Is(err, fence.ErrNotFound) {
			t.Errorf("Get(%q): %v, want fence.ErrNotFound and fence.ErrNotFound", r, err)
		}
	}
}

// TestMissingBucketTyped: New over a bucket that does not exist returns a
// *BucketError (ErrBucket) that still matches jetstream.ErrBucketNotFound.
func TestMissingBucketTyped(t *testing.T) {
	js := connect(t, natsURL(), nil)
	_, err := New(context.Background(), Config{Client: js, Bucket: "fktest_no_such_bucket"})
	var be *BucketError
	if !errors.As(err, &be) || be.Bucket != "fktest_no_such_bucket" || !errors.Is(err, ErrBucket) || !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("New over a missing bucket: %v, want *BucketError matching jetstream.ErrBucketNotFound", err)
	}
}

// TestNilContext: every call given a nil context returns fence.ErrNilArgument
// instead of panicking, and writes nothing.
func TestNilContext(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g := guard(t, bucket, Config{})
	write := func(context.Context) error { t.Error("Fence ran its write with a nil context"); return nil }
	//nolint:staticcheck // a nil context is the input under test
	calls := map[string]func() error{
		"Put":    func() error { return g.Put(nil, "nil/ctx", []byte("v")) },
		"Delete": func() error { return g.Delete(nil, "nil/ctx") },
		"Get":    func() error { _, _, err := g.Get(nil, "nil/ctx"); return err },
		"Mark":   func() error { _, err := g.Mark(nil, "nil/ctx"); return err },
		"Fence":  func() error { return g.Fence(nil, "nil/ctx", 1, write) },
		"Do":     func() error { return g.Do(nil, "nil/ctx", write) },
	}
	for name, call := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s(nil ctx) panicked: %v", name, r)
				}
			}()
			if err := call(); !errors.Is(err, fence.ErrNilArgument) {
				t.Errorf("%s(nil ctx): %v, want fence.ErrNilArgument", name, err)
			}
		}()
	}
	if _, err := g.stream.GetLastMsgForSubject(context.Background(), g.prefix+Key("nil/ctx")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("after calls with a nil ctx the key holds a record (or the read failed): %v", err)
	}
}
