package gcsguard

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/fencekit/fencekit/fence"
)

// loseFirstUpload makes the emulator apply the next upload and answer 503
// instead of its reply (after runs before the 503 is sent); it counts the
// uploads from then on. Each test writes one key.
func loseFirstUpload(e *emulator, after func()) *int {
	var mu sync.Mutex
	n := new(int)
	e.setFault(func(r *http.Request) bool {
		if !strings.HasPrefix(r.URL.Path, "/upload/") {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		*n++
		if *n == 1 && after != nil {
			defer after()
		}
		return *n == 1
	})
	return n
}

// TestLostReplyRetried: the upload lands, its reply is lost (503), the
// client library retries the conditional write, which meets 412 because the
// first attempt landed. The Guard must recognise its own write id and
// report success.
func TestLostReplyRetried(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	const key = "lost/retried"
	for _, tok := range []fence.Token{3, 4} { // first write (DoesNotExist) and an overwrite (GenerationMatch)
		uploads := loseFirstUpload(e, nil)
		info, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), key, strings.NewReader("v"), int64(len("v")), PutOptions{})
		e.setFault(nil)
		if err != nil {
			t.Fatalf("token %d: write whose reply was lost: %v", tok, err)
		}
		// Two: the lost one and the library's retry that met 412. A third
		// would mean the Guard did not recognise its own write and wrote
		// again.
		if *uploads != 2 {
			t.Fatalf("token %d: %d uploads, want 2 (the lost one and the library's retry)", tok, *uploads)
		}
		got, err := s.Stat(ctx, key)
		if err != nil || got.WriteID != info.WriteID || got.Token != tok {
			t.Fatalf("token %d: stored %+v (%v), reported %+v", tok, got, err, info)
		}
	}
}

// TestLostReplyNoLibraryRetry: with the library's retries off, the lost
// reply is an error of unknown outcome; the Guard settles it by reading and
// reports success because the object is its own.
func TestLostReplyNoLibraryRetry(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	c := e.client(t)
	c.SetRetry(storage.WithPolicy(storage.RetryNever))
	s := e.store(t, "", Config{Client: c})
	const key = "lost/noretry"
	uploads := loseFirstUpload(e, nil)
	info, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 6)), key, strings.NewReader("v"), int64(len("v")), PutOptions{})
	e.setFault(nil)
	if err != nil {
		t.Fatalf("write whose reply was lost: %v", err)
	}
	if *uploads != 1 {
		t.Fatalf("%d uploads, want 1 (no library retry)", *uploads)
	}
	if got, _ := s.Stat(ctx, key); got.WriteID != info.WriteID {
		t.Fatalf("stored write id %s, reported %s", got.WriteID, info.WriteID)
	}
}

// TestLostReplyOvertaken: the reply is lost and, before the library's
// retry, a newer holder writes. The retry meets 412 caused by someone else:
// the Guard must not report success; it reports the write as stale.
func TestLostReplyOvertaken(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	const key = "lost/overtaken"
	if _, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 7)), key, strings.NewReader("seven"), int64(len("seven")), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	uploads := loseFirstUpload(e, func() {
		// The newer holder's write, applied before the 503 goes out.
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
	if !ok || se.Presented != 8 || se.Highest != 9 {
		t.Fatalf("overtaken lost reply: %v (uploads %d), want StaleError{8, 9}", err, *uploads)
	}
	b, info, err := s.GetBytes(ctx, key)
	if err != nil || string(b) != "nine" || info.Token != 9 {
		t.Fatalf("final: %q %+v %v", b, info, err)
	}
}

// TestUnknownOutcomeNotLanded: a write that fails with an error the
// library does not retry, and that did not land, reports that error: not
// success, not stale, not busy.
func TestUnknownOutcomeNotLanded(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	c := e.client(t)
	c.SetRetry(storage.WithPolicy(storage.RetryNever))
	s := e.store(t, "", Config{Client: c})
	const key = "lost/notlanded"
	if _, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 2)), key, strings.NewReader("two"), int64(len("two")), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	e.setFault(func(r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/upload/") {
			q := r.URL.Query()
			q.Set("ifGenerationMatch", "1") // make the upload fail inside the emulator
			r.URL.RawQuery = q.Encode()
		}
		return strings.HasPrefix(r.URL.Path, "/upload/")
	})
	_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), key, strings.NewReader("three"), int64(len("three")), PutOptions{})
	e.setFault(nil)
	if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrBusy) {
		t.Fatalf("unknown outcome: %v, want the store error", err)
	}
	if !strings.Contains(err.Error(), "outcome unknown") || !errors.Is(err, fence.ErrOutcomeUnknown) {
		t.Fatalf("error %q does not say the outcome is unknown (fence.ErrOutcomeUnknown)", err)
	}
	b, info, err := s.GetBytes(ctx, key)
	if err != nil || string(b) != "two" || info.Token != 2 {
		t.Fatalf("after a failed write: %q %+v %v", b, info, err)
	}
}

// hangTransport never sends an upload: it waits for the request's context
// to end (an upload stuck on its way), and tells started when it begins.
type hangTransport struct {
	next    http.RoundTripper
	started chan struct{}
}

func (h *hangTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(req.URL.Path, "/upload/") {
		return h.next.RoundTrip(req)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	close(h.started)
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// TestContextEndedDuringUploadNotLanded: the context ends (a lost lease)
// while the upload is in flight, and the settling read, made with a
// context of its own, does not find it: the outcome is unknown (the upload
// might still complete), never "nothing written", and the error matches the
// context's end and its cause as well.
func TestContextEndedDuringUploadNotLanded(t *testing.T) {
	e := newEmulator(t)
	ht := &hangTransport{started: make(chan struct{})}
	s := e.store(t, "", Config{Client: e.clientVia(t, func(rt http.RoundTripper) http.RoundTripper { ht.next = rt; return ht })})
	cause := errors.New("test: lease lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-ht.started
		cancel(cause)
	}()
	_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 2)), "ended/upload", strings.NewReader("two"), int64(len("two")), PutOptions{})
	if !errors.Is(err, fence.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("error %v: want an unknown outcome matching the context's end and its cause", err)
	}
	if _, _, err := s.GetBytes(context.Background(), "ended/upload"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("after the write that did not land: %v, want not found", err)
	}
}

// TestContextEndedBeforeUploadIsNothingWritten: a context that ends inside
// Fence's write callback, before the upload is sent: "nothing written".
func TestContextEndedBeforeUploadIsNothingWritten(t *testing.T) {
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	cause := errors.New("test: lease lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	before := e.requests.Load()
	err := s.Fence(ctx, "ended/before", 2, func(ctx context.Context) error {
		if err := StageBytes(ctx, []byte("two"), PutOptions{}); err != nil {
			return err
		}
		cancel(cause)
		return nil
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) || errors.Is(err, fence.ErrOutcomeUnknown) {
		t.Fatalf("error %v: want the context's end with its cause, and no unknown outcome", err)
	}
	if n := e.requests.Load() - before; n != 1 {
		t.Fatalf("%d requests, want 1 (the metadata read): nothing may be sent after the context ended", n)
	}
}
