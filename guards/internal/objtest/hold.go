package objtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
)

// HoldTransport forwards every request to Next, except that while armed
// for a key it keeps the FIRST committing request of that key from the
// server and fails it with Err before the reply would come, so the client
// retries; the retries go through. The kept copy is delivered later,
// unchanged, as a request delayed in transit past the client's timeout
// would arrive. It may be armed for several keys at once.
type HoldTransport struct {
	// Next sends the requests on. Required.
	Next http.RoundTripper
	// Key names the key whose committing request req is, or "" for a
	// request that is never held.
	Key func(req *http.Request) string
	// Err is what the client sees for a held request: an error it retries
	// (a connection reset).
	Err error

	mu    sync.Mutex
	armed map[string]*Held // key -> nil until its first request is held
}

// Held is a request a HoldTransport kept from the server.
type Held struct {
	next   http.RoundTripper
	method string
	url    string
	header http.Header
	body   []byte
	// Status is the server's answer once delivered.
	Status int
}

// Arm makes d hold the next committing request of key.
func (d *HoldTransport) Arm(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed == nil {
		d.armed = map[string]*Held{}
	}
	d.armed[key] = nil
}

// Take disarms key and returns its held request (nil: none was sent).
func (d *HoldTransport) Take(key string) *Held {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.armed[key]
	delete(d.armed, key)
	return h
}

// RoundTrip implements http.RoundTripper.
func (d *HoldTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := d.Key(req)
	d.mu.Lock()
	h, armed := d.armed[key]
	hold := key != "" && armed && h == nil
	d.mu.Unlock()
	if !hold {
		return d.Next.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
	}
	d.mu.Lock()
	d.armed[key] = &Held{next: d.Next, method: req.Method, url: req.URL.String(), header: req.Header.Clone(), body: body}
	d.mu.Unlock()
	return nil, d.Err
}

// Deliver sends h to the server as it was sent and records the answer in
// h.Status.
func (h *Held) Deliver(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, h.method, h.url, bytes.NewReader(h.body))
	if err != nil {
		return err
	}
	req.Header = h.header.Clone()
	req.ContentLength = int64(len(h.body))
	resp, err := h.next.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	h.Status = resp.StatusCode
	return nil
}
