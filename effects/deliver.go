package effects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Delivery is one attempt to deliver an effect, as a relay hands it to a
// Deliverer.
type Delivery struct {
	ID      uuid.UUID
	Target  string
	Key     string // IdempotencyKey(ID): the same on every attempt
	Request []byte // the frozen request, byte for byte as recorded
	Attempt int    // 1 for the first claim
}

// Result is what the target answered to a delivered request.
type Result struct {
	Code   int    // status or reply code, 0 when none
	Detail string // a short description (shortened to 512 bytes when stored)
}

// Deliverer sends one effect to its target. Deliver returns nil when the
// target accepted the request; an error built with Reject when it refused
// it for good; an error wrapped with NotSent when the request provably did
// not reach it; a *RetryAfterError when the target asked to wait; any other
// error when the outcome is unknown (the relay retries an idempotent
// target with the same Key until the target's dedup window passes, and
// ends an at-most-once target's effect ambiguous). Deliver must pass Key
// to targets that deduplicate on one, and must stop when ctx ends (the
// relay's claim is ending).
type Deliverer interface {
	Deliver(ctx context.Context, d Delivery) (Result, error)
}

// DelivererFunc adapts a function to Deliverer.
type DelivererFunc func(ctx context.Context, d Delivery) (Result, error)

// Deliver calls f.
func (f DelivererFunc) Deliver(ctx context.Context, d Delivery) (Result, error) { return f(ctx, d) }

// HTTPRequest is the frozen form of an HTTP call, for HTTP targets.
type HTTPRequest struct {
	Method string      `json:"method"`
	URL    string      `json:"url"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
}

// Freeze checks r (an absolute http or https URL with a host, a method of
// RFC 9110's token characters) and encodes it as the bytes Record stores.
// The error is a *InputError.
func (r HTTPRequest) Freeze() ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

func (r HTTPRequest) validate() error {
	if r.Method == "" {
		return &InputError{Field: "Request", Reason: "HTTP method empty"}
	}
	for _, c := range r.Method {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", c) {
			return &InputError{Field: "Request", Reason: fmt.Sprintf("HTTP method %q invalid", shorten(r.Method))}
		}
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return &InputError{Field: "Request", Reason: "bad URL: " + shorten(err.Error())}
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &InputError{Field: "Request", Reason: fmt.Sprintf("URL %q: want an absolute http or https URL", shorten(r.URL))}
	}
	for k := range r.Header {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return &InputError{Field: "Request", Reason: fmt.Sprintf("header name %q invalid", shorten(k))}
		}
	}
	return nil
}

// HTTP delivers frozen HTTPRequests. It sends the idempotency key in
// KeyHeader; a 2xx reply is delivered; 408, 425, 429 and 5xx replies,
// timeouts and connection errors are retried (a Retry-After header is
// honoured); any other reply (4xx, and 3xx the client did not follow) is
// rejected.
type HTTP struct {
	// Client sends the requests. Nil uses a client with no timeout of its
	// own (the relay's claim bounds each attempt).
	Client *http.Client
	// KeyHeader is the header carrying the idempotency key. Default
	// "Idempotency-Key".
	KeyHeader string
}

// Validate implements Validator: request must decode as an HTTPRequest
// that Freeze accepts.
func (h *HTTP) Validate(request []byte) error {
	_, err := decodeHTTP(request)
	return err
}

func decodeHTTP(request []byte) (HTTPRequest, error) {
	var r HTTPRequest
	if err := json.Unmarshal(request, &r); err != nil {
		return r, &InputError{Field: "Request", Reason: "not a frozen HTTPRequest: " + shorten(err.Error())}
	}
	return r, r.validate()
}

// Deliver implements Deliverer.
func (h *HTTP) Deliver(ctx context.Context, d Delivery) (Result, error) {
	r, err := decodeHTTP(d.Request)
	if err != nil {
		return Result{}, Reject(0, err.Error()) // cannot become valid by retrying
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return Result{}, Reject(0, err.Error())
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	kh := h.KeyHeader
	if kh == "" {
		kh = "Idempotency-Key"
	}
	req.Header.Set(kh, d.Key)
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return Result{}, NotSent(err)
		}
		return Result{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxDetail))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	res := Result{Code: resp.StatusCode, Detail: resp.Status + ": " + strings.TrimSpace(string(body))}
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return res, nil
	case c == http.StatusRequestTimeout, c == http.StatusTooEarly, c == http.StatusTooManyRequests, c >= 500:
		err := fmt.Errorf("effects: HTTP %s", resp.Status)
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return res, &RetryAfterError{Err: err, After: after}
		}
		return res, err
	default:
		return res, Reject(c, res.Detail)
	}
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
		return 0, true
	}
	return 0, false
}
