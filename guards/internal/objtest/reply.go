package objtest

import (
	"context"
	"io"
	"net/http"
	"sync"
)

// ReplyTransport forwards every request to Next. While armed for a key,
// the first committing request of that key is forwarded under a context
// that does not end with the caller's, so the server applies it; the
// transport then calls applied (when the server answered 2xx) and keeps
// the reply from the client until the request's context ends, and fails it
// with the context's error, as a transport whose caller gave up waiting
// does. It may be armed for several keys at once (concurrent writes to
// different resources).
type ReplyTransport struct {
	// Next sends the requests on. Required.
	Next http.RoundTripper
	// Key names the key whose committing request req is, or "" for a
	// request that is never held.
	Key func(req *http.Request) string

	mu    sync.Mutex
	armed map[string]func() // key -> applied, until its first request
}

// Arm makes t hold the reply of key's next committing request and call
// applied once the server applied it.
func (t *ReplyTransport) Arm(key string, applied func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.armed == nil {
		t.armed = map[string]func(){}
	}
	t.armed[key] = applied
}

// Disarm stops holding key's replies.
func (t *ReplyTransport) Disarm(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.armed, key)
}

// RoundTrip implements http.RoundTripper.
func (t *ReplyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := t.Key(req)
	t.mu.Lock()
	applied, held := t.armed[key]
	held = held && key != ""
	if held {
		delete(t.armed, key) // the first attempt only
	}
	t.mu.Unlock()
	if !held {
		return t.Next.RoundTrip(req)
	}
	ctx := req.Context()
	resp, err := t.Next.RoundTrip(req.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		applied()
	}
	<-ctx.Done() // the reply is held until the caller's context ends
	return nil, ctx.Err()
}
