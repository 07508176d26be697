package s3guard

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/objtest"
)

// overtakeTransport lets the first PUT of path land, then runs overtake (a
// newer holder's write) and fails the PUT with err instead of its reply.
// With refuseLater, every later PUT of path fails with err without
// reaching MinIO (an SDK that gave up).
type overtakeTransport struct {
	path        string
	err         error
	refuseLater bool
	overtake    func()

	mu sync.Mutex
	n  int
}

func (o *overtakeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || req.URL.Path != o.path {
		return http.DefaultTransport.RoundTrip(req)
	}
	o.mu.Lock()
	o.n++
	n := o.n
	o.mu.Unlock()
	if n > 1 {
		if o.refuseLater {
			return nil, o.err
		}
		return http.DefaultTransport.RoundTrip(req)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	o.overtake()
	return nil, o.err
}

// TestLostReplyOvertakenIsMarked: the pointer PUT lands, its reply is lost,
// the SDK gives up, and a newer holder writes before the Guard's settling
// read. The write was applied and then overwritten, and its request can no
// longer land (the pointer's ETag moved on): the error is a
// *fence.StaleError with Overtaken set, not an unknown outcome.
func TestLostReplyOvertakenIsMarked(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		for _, tc := range []struct {
			name string
			err  error
		}{
			{"sdk gave up", x509.UnknownAuthorityError{}}, // minio-go does not retry it
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := "overtaken/" + map[bool]string{true: "gave-up", false: "retried"}[!errors.Is(tc.err, errReplyLost)]
				direct := e.store(t, nil, nil)
				if _, err := put(t, direct, key, 7, "seven"); err != nil {
					t.Fatal(err)
				}
				ot := &overtakeTransport{path: "/" + e.bucket + "/" + key, err: tc.err,
					refuseLater: !errors.Is(tc.err, errReplyLost), overtake: func() {
						if _, err := put(t, direct, key, 9, "nine"); err != nil {
							t.Error(err)
						}
					}}
				s := e.store(t, e.newClient(t, ot), nil)
				_, err := put(t, s, key, 8, "eight")
				se, ok := fence.IsStale(err)
				if !ok || se.Presented != 8 || se.Highest != 9 || !se.Overtaken {
					t.Fatalf("landed, reply lost, overtaken: %v, want StaleError{8, 9} with Overtaken", err)
				}
				if got, gi := content(t, direct, key); got != "nine" || gi.Token != 9 {
					t.Fatalf("final %q %+v", got, gi)
				}
			})
		}
	})
}

var _ objtest.Guard[PutOptions, Info] = (*Guard)(nil)

// TestNotFoundMatchesFence: a read of a resource without content matches
// fence.ErrNotFound.
func TestNotFoundMatchesFence(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		if err := objtest.CheckNotFound(testCtx(t), e.store(t, nil, nil), nil); err != nil {
			t.Error(err)
		}
	})
}

// TestNilContext: every call given a nil context returns fence.ErrNilArgument
// instead of panicking, and writes nothing.
func TestNilContext(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		write := func(context.Context) error { t.Error("Fence ran its write with a nil context"); return nil }
		calls := objtest.NilContextCalls(s, "nil/ctx", write)
		if err := objtest.CheckNilContext(calls); err != nil {
			t.Error(err)
		}
		for _, k := range e.listAll(t) {
			t.Errorf("object %q written by a call with a nil context", k)
		}
	})
}
