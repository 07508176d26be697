package httpguard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/memguard"
)

// FuzzMiddlewareHeaders sends arbitrary fencing headers (one or two token
// values, one resource value, an optional run value) through the middleware
// over a memguard whose resource already holds token 10 set by run
// "run-a". Whatever the headers:
//   - nothing panics;
//   - the handler runs only for exactly one canonical token >= 10, exactly
//     one valid resource name and no run or a valid one (not another run's
//     at token 10), and then the mark becomes that token;
//   - every other request is answered 400 (malformed), 409 stale-token or
//     409 token-reused with a problem body that ErrorFromResponse decodes to
//     the matching error, the handler does not run and the mark is
//     unchanged.
func FuzzMiddlewareHeaders(f *testing.F) {
	f.Add("11", "", "reports/q3", "")
	f.Add("10", "", "reports/q3", "")
	f.Add("10", "", "reports/q3", "run-a")
	f.Add("10", "", "reports/q3", "run-b")
	f.Add("11", "", "reports/q3", "run-b")
	f.Add("10", "", "reports/q3", "run b")
	f.Add("10", "", "reports/q3", "run-a\r\nFencing-Token: 99")
	f.Add("10", "", "reports/q3", "0b9c6f9e-1f6c-4b52-9c33-3c1c2d3e4f50")
	f.Add("10", "", "reports/q3", "0b9c6f9e-1f6c-4b52-9c33-3c1c2d3e4f50-0b9c6f9e-1f6c-4b52-9c33-3c1c2d3e4f50")
	f.Add("9", "", "reports/q3", "")
	f.Add("11", "12", "reports/q3", "")
	f.Add("011", "", "reports/q3", "")
	f.Add(" 11", "", "reports/q3", "")
	f.Add("-11", "", "reports/q3", "")
	f.Add("9223372036854775808", "", "reports/q3", "")
	f.Add("11", "", "", "")
	f.Add("11", "", "a\x00b", "")
	f.Add("11", "", "a\r\nFencing-Token: 99", "")
	f.Add("11", "", "\xff\xfe", "")
	f.Add("١١", "", "r", "")
	f.Fuzz(func(t *testing.T, tok1, tok2, resource, run string) {
		g, err := memguard.New(memguard.Config{})
		if err != nil {
			t.Fatal(err)
		}
		const seeded = "reports/q3"
		seedCtx := fence.WithClaim(context.Background(), fence.Claim{Token: 10, Run: "run-a"})
		if err := g.Fence(seedCtx, seeded, 10, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		mw, err := httpguard.Middleware(g, httpguard.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			w.WriteHeader(http.StatusNoContent)
		}))
		req := httptest.NewRequest(http.MethodPost, "/write", nil)
		// Set headers directly, as a hostile client's raw bytes would
		// arrive after net/http's own parsing.
		req.Header[httpguard.DefaultTokenHeader] = []string{tok1}
		if tok2 != "" {
			req.Header[httpguard.DefaultTokenHeader] = append(req.Header[httpguard.DefaultTokenHeader], tok2)
		}
		req.Header[httpguard.DefaultResourceHeader] = []string{resource}
		if run != "" {
			req.Header[httpguard.DefaultRunHeader] = []string{run}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		resp := rec.Result()
		defer resp.Body.Close()

		before := fence.Token(10)
		if resource != seeded {
			before = 0
		}
		parsed, perr := fence.Parse(tok1)
		wellFormed := tok2 == "" && perr == nil && fence.ValidateResource(resource) == nil && fence.ValidateRun(run) == nil
		reused := wellFormed && resource == seeded && parsed == 10 && run != "" && run != "run-a"
		mark := markOf(g, resource)
		switch {
		case reused:
			if resp.StatusCode != http.StatusConflict {
				t.Fatalf("reused token 10 from run %q: status %d", run, resp.StatusCode)
			}
			re, ok := fence.IsReused(httpguard.ErrorFromResponse(resp))
			if !ok || re.Token != 10 || re.Run != run || re.MarkRun != "run-a" || re.Resource != resource {
				t.Fatalf("reused answer does not decode to the reused error: %+v", re)
			}
		case wellFormed && parsed >= before:
			if !ran || resp.StatusCode != http.StatusNoContent || mark != parsed {
				t.Fatalf("valid request %q/%q: ran=%v status=%d mark=%d", tok1, resource, ran, resp.StatusCode, mark)
			}
			return
		case wellFormed:
			if resp.StatusCode != http.StatusConflict {
				t.Fatalf("stale token %d: status %d", parsed, resp.StatusCode)
			}
			se, ok := fence.IsStale(httpguard.ErrorFromResponse(resp))
			if !ok || se.Presented != parsed || se.Highest != before || se.Resource != resource {
				t.Fatalf("stale answer does not decode to the stale error: %+v", se)
			}
		default:
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("malformed %q,%q/%q: status %d", tok1, tok2, resource, resp.StatusCode)
			}
			var pe *httpguard.ProblemError
			if err := httpguard.ErrorFromResponse(resp); !errors.As(err, &pe) || pe.StatusCode != http.StatusBadRequest {
				t.Fatalf("400 answer does not decode to a ProblemError: %v", err)
			}
		}
		if ran {
			t.Fatalf("handler ran for a refused request %q,%q/%q", tok1, tok2, resource)
		}
		if mark != before && fence.ValidateResource(resource) == nil {
			t.Fatalf("mark of %q changed to %d by a refused request", resource, mark)
		}
		if markOf(g, seeded) != 10 && resource != seeded {
			t.Fatalf("unrelated mark changed")
		}
	})
}
