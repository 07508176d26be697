package s3guard

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
)

// faultyTransport forwards every request to MinIO. For PUTs whose path
// matches, it records the status MinIO answered and, on the attempts listed
// in drop, throws the reply away and reports a network error, as a reply lost
// on the way back would. before, when set, runs before a matching PUT is
// forwarded (1-based attempt number).
type faultyTransport struct {
	match  func(path string) bool
	drop   map[int]bool
	before func(attempt int)
	// fake, when it returns a response, answers instead of MinIO (the
	// request is not forwarded).
	fake func(attempt int, req *http.Request) *http.Response
	// dropErr is the error a dropped reply turns into (default
	// errReplyLost, which the SDK retries).
	dropErr error
	// refuse lists attempts that fail with dropErr without reaching MinIO.
	refuse map[int]bool

	mu       sync.Mutex
	statuses []int
}

var errReplyLost = errors.New("injected: connection reset before the reply arrived")

func (f *faultyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || !f.match(req.URL.Path) {
		return http.DefaultTransport.RoundTrip(req)
	}
	f.mu.Lock()
	attempt := len(f.statuses) + 1
	f.statuses = append(f.statuses, 0)
	f.mu.Unlock()
	if f.before != nil {
		f.before(attempt)
	}
	if f.fake != nil {
		if resp := f.fake(attempt, req); resp != nil {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			f.mu.Lock()
			f.statuses[attempt-1] = resp.StatusCode
			f.mu.Unlock()
			return resp, nil
		}
	}
	dropErr := f.dropErr
	if dropErr == nil {
		dropErr = errReplyLost
	}
	if f.refuse[attempt] {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, dropErr
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.statuses[attempt-1] = resp.StatusCode
	f.mu.Unlock()
	if f.drop[attempt] {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, dropErr
	}
	return resp, nil
}

func (f *faultyTransport) seen() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.statuses...)
}

func pathIs(bucket, key string) func(string) bool {
	return func(p string) bool { return p == "/"+bucket+"/"+key }
}

// TestLostReplyRetry: the pointer PUT lands but its reply is lost; the SDK
// retries, MinIO answers 412 (the object changed — by us). Put must report
// success, and the pointer must be ours. The reverse: a 412 caused by
// someone else's write is not taken for ours.
func TestLostReplyRetry(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {

		for _, existing := range []bool{false, true} {
			name := map[bool]string{false: "create", true: "overwrite"}[existing]
			t.Run("pointer/"+name, func(t *testing.T) {
				key := "lost/" + name
				var prev Info
				if existing { // If-Match path; else If-None-Match: *
					var err error
					prev, err = put(t, e.store(t, nil, nil), key, 3, "before")
					require.NoError(t, err)
				}
				ft := &faultyTransport{match: pathIs(e.bucket, key), drop: map[int]bool{1: true}}
				s := e.store(t, e.newClient(t, ft), nil)
				info, err := put(t, s, key, 4, "mine")
				require.NoError(t, err, "a landed write whose reply was lost is a success")
				assert.Equal(t, []int{http.StatusOK, http.StatusPreconditionFailed}, ft.seen(),
					"the first PUT landed (reply dropped), the SDK's retry got 412")
				got, gi := content(t, e.store(t, nil, nil), key)
				assert.Equal(t, "mine", got)
				assert.Equal(t, info.WriteID, gi.WriteID)
				assert.Equal(t, fence.Token(4), gi.Token)
				if existing {
					for _, k := range e.listAll(t) {
						assert.NotEqual(t, prev.DataKey, k, "superseded data removed after the recovered write")
					}
				}
			})
		}

		t.Run("data", func(t *testing.T) {
			// Same for the data object's If-None-Match: * upload.
			const key = "lost/data"
			ft := &faultyTransport{match: func(p string) bool {
				return strings.HasPrefix(p, "/"+e.bucket+"/"+DefaultDataPrefix+key+"/")
			}, drop: map[int]bool{1: true}}
			s := e.store(t, e.newClient(t, ft), nil)
			info, err := put(t, s, key, 2, "data")
			require.NoError(t, err)
			assert.Equal(t, []int{http.StatusOK, http.StatusPreconditionFailed}, ft.seen())
			got, gi := content(t, s, key)
			assert.Equal(t, "data", got)
			assert.Equal(t, info, gi)
		})

		t.Run("someone-else/higher", func(t *testing.T) {
			// A newer holder's write lands just before ours reaches MinIO; our
			// PUT gets a genuine 412. That must be a stale refusal, not success.
			const key = "lost/other-higher"
			other := e.store(t, e.newClient(t, nil), nil)
			var theirs Info
			ft := &faultyTransport{match: pathIs(e.bucket, key), before: func(attempt int) {
				if attempt == 1 {
					var err error
					theirs, err = put(t, other, key, 9, "theirs")
					require.NoError(t, err)
				}
			}}
			s := e.store(t, e.newClient(t, ft), nil)
			_, err := put(t, s, key, 8, "mine")
			se, ok := fence.IsStale(err)
			require.True(t, ok, "want stale, got %v", err)
			assert.Equal(t, fence.Token(8), se.Presented)
			assert.Equal(t, fence.Token(9), se.Highest)
			assert.Equal(t, []int{http.StatusPreconditionFailed}, ft.seen())
			got, gi := content(t, other, key)
			assert.Equal(t, "theirs", got)
			assert.Equal(t, theirs.WriteID, gi.WriteID)
			for _, k := range e.listAll(t) {
				assert.False(t, strings.HasPrefix(k, DefaultDataPrefix+key+"/") && k != theirs.DataKey,
					"the refused writer's staged data %q must be removed", k)
			}
		})

		t.Run("someone-else/equal", func(t *testing.T) {
			// The other write carries the same token (the same acquisition in
			// another process): not ours, not stale — retry on top of it.
			const key = "lost/other-equal"
			other := e.store(t, e.newClient(t, nil), nil)
			var theirs Info
			ft := &faultyTransport{match: pathIs(e.bucket, key), before: func(attempt int) {
				if attempt == 1 {
					var err error
					theirs, err = put(t, other, key, 8, "theirs")
					require.NoError(t, err)
				}
			}}
			s := e.store(t, e.newClient(t, ft), nil)
			mine, err := put(t, s, key, 8, "mine")
			require.NoError(t, err)
			assert.NotEqual(t, theirs.WriteID, mine.WriteID)
			assert.Equal(t, []int{http.StatusPreconditionFailed, http.StatusOK}, ft.seen(),
				"the 412 was theirs; ours took a second, real write")
			got, gi := content(t, other, key)
			assert.Equal(t, "mine", got)
			assert.Equal(t, mine.WriteID, gi.WriteID)
		})
	})
}

// conflict409 is the reply AWS S3 gives a conditional write that races a
// concurrent one. MinIO does not send it, so the test fakes it.
func conflict409(req *http.Request) *http.Response {
	const body = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional operation is currently in progress against this resource. Please try again.</Message></Error>`
	return &http.Response{
		StatusCode: http.StatusConflict, Status: "409 Conflict", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/xml"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func TestConditionalRequestConflict(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {

		t.Run("retried", func(t *testing.T) {
			const key = "conflict/retried"
			ft := &faultyTransport{match: pathIs(e.bucket, key), fake: func(attempt int, req *http.Request) *http.Response {
				if attempt <= 2 {
					return conflict409(req)
				}
				return nil
			}}
			s := e.store(t, e.newClient(t, ft), func(c *Config) { c.ConflictBackoff = time.Millisecond })
			info, err := put(t, s, key, 3, "after conflicts")
			require.NoError(t, err)
			assert.Equal(t, []int{http.StatusConflict, http.StatusConflict, http.StatusOK}, ft.seen())
			got, gi := content(t, s, key)
			assert.Equal(t, "after conflicts", got)
			assert.Equal(t, info.WriteID, gi.WriteID)
		})

		t.Run("busy", func(t *testing.T) {
			const key = "conflict/busy"
			_, err := put(t, e.store(t, nil, nil), key, 1, "before")
			require.NoError(t, err)
			before := e.snapshot(t)
			ft := &faultyTransport{match: pathIs(e.bucket, key), fake: func(_ int, req *http.Request) *http.Response {
				return conflict409(req)
			}}
			s := e.store(t, e.newClient(t, ft), func(c *Config) { c.MaxAttempts = 3; c.ConflictBackoff = time.Millisecond })
			_, err = put(t, s, key, 2, "never")
			assert.ErrorIs(t, err, fence.ErrBusy)
			assert.NotErrorIs(t, err, fence.ErrStale)
			assert.Len(t, ft.seen(), 3, "MaxAttempts conditional writes")
			assert.Equal(t, before, e.snapshot(t), "busy: nothing changed, staged data removed")
		})
	})
}

// TestBusyAfterLostRaces: every conditional write loses to an equal-token
// writer (not stale, so worth retrying); after MaxAttempts the call gives
// up with fence.ErrBusy, and its staged data is gone.
func TestBusyAfterLostRaces(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		const key = "busy"
		other := e.store(t, e.newClient(t, nil), nil)
		var last Info
		ft := &faultyTransport{match: pathIs(e.bucket, key), before: func(attempt int) {
			var err error
			last, err = put(t, other, key, 5, fmt.Sprintf("theirs-%d", attempt))
			require.NoError(t, err)
		}}
		s := e.store(t, e.newClient(t, ft), func(c *Config) { c.MaxAttempts = 4 })
		_, err := put(t, s, key, 5, "mine")
		require.ErrorIs(t, err, fence.ErrBusy)
		assert.Equal(t, []int{412, 412, 412, 412}, ft.seen())
		got, gi := content(t, other, key)
		assert.Equal(t, "theirs-4", got)
		assert.Equal(t, last.WriteID, gi.WriteID)
		assert.ElementsMatch(t, []string{key, last.DataKey}, e.listAll(t))
	})
}

// TestUnknownOutcome: the pointer PUT fails and the SDK gives up, so nothing
// tells whether it landed. minio-go does not retry an x509 error (as from a
// TLS-intercepting proxy) at all; aws-sdk-go-v2 retries every transport
// error, so there the fault lasts for all of its attempts. Put confirms by
// re-reading the pointer: ours means success; otherwise it reports the error
// (neither stale nor busy) and keeps the staged data, which may still be
// committed by a request in flight.
func TestUnknownOutcome(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		noRetry := x509.UnknownAuthorityError{}
		// refuseAll refuses every attempt from the n-th on.
		refuseAll := func(from int) map[int]bool {
			m := map[int]bool{}
			for i := from; i <= 16; i++ {
				m[i] = true
			}
			return m
		}

		t.Run("landed", func(t *testing.T) {
			const key = "unknown/landed"
			ft := &faultyTransport{match: pathIs(e.bucket, key), drop: map[int]bool{1: true}, dropErr: noRetry}
			want := []int{http.StatusOK}
			if e.kind.retriesAll {
				ft.refuse = refuseAll(2)
				want = []int{http.StatusOK, 0, 0} // the SDK's two retries never reach MinIO
			}
			s := e.store(t, e.newClient(t, ft), nil)
			info, err := put(t, s, key, 2, "mine")
			require.NoError(t, err)
			assert.Equal(t, want, ft.seen(), "the SDK gave up; the re-read confirmed the write")
			_, gi := content(t, s, key)
			assert.Equal(t, info.WriteID, gi.WriteID)
		})

		t.Run("not landed", func(t *testing.T) {
			const key = "unknown/lost"
			_, err := put(t, e.store(t, nil, nil), key, 1, "before")
			require.NoError(t, err)
			ft := &faultyTransport{match: pathIs(e.bucket, key), refuse: map[int]bool{1: true}, dropErr: noRetry}
			if e.kind.retriesAll {
				ft.refuse = refuseAll(1)
			}
			s := e.store(t, e.newClient(t, ft), nil)
			_, err = put(t, s, key, 2, "mine")
			require.Error(t, err)
			assert.NotErrorIs(t, err, fence.ErrStale)
			assert.NotErrorIs(t, err, fence.ErrBusy)
			assert.ErrorIs(t, err, fence.ErrOutcomeUnknown)
			assert.Contains(t, err.Error(), "outcome unknown")
			got, gi := content(t, s, key)
			assert.Equal(t, "before", got)
			assert.Equal(t, fence.Token(1), gi.Token)
			var staged int
			for _, k := range e.listAll(t) {
				if strings.HasPrefix(k, dataKey(DefaultDataPrefix, key, 2, "")) {
					staged++
				}
			}
			assert.Equal(t, 1, staged, "the staged data object is kept")
		})
	})
}
