package httpguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/memguard"
)

// A side-effecting service behind the middleware, and a client whose
// Transport sends the token and resource from the context. Run B (token 8)
// writes; run A's late request with token 7 gets 409, which ErrorFromResponse
// turns back into a *fence.StaleError.
func Example() {
	g, err := memguard.New(memguard.Config{})
	if err != nil {
		panic(err)
	}
	fenced, err := httpguard.Middleware(g, httpguard.Config{})
	if err != nil {
		panic(err)
	}
	report := ""
	srv := httptest.NewServer(fenced(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := fence.FromContext(r.Context())
		report = "written under token " + tok.String()
		w.WriteHeader(http.StatusNoContent)
	})))
	defer srv.Close()
	client := &http.Client{Transport: &httpguard.Transport{Base: srv.Client().Transport}}

	send := func(run string, token fence.Token) {
		ctx := httpguard.WithResource(fence.WithToken(context.Background(), token), "reports/q3")
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		err = httpguard.ErrorFromResponse(resp)
		if se, ok := fence.IsStale(err); ok {
			fmt.Printf("%s: %d, stale: token %d < %d\n", run, resp.StatusCode, se.Presented, se.Highest)
			return
		}
		fmt.Printf("%s: %d, err=%v\n", run, resp.StatusCode, err)
	}
	send("B", 8)
	send("A", 7)
	fmt.Println(report)
	// Output:
	// B: 204, err=<nil>
	// A: 409, stale: token 7 < 8
	// written under token 8
}

// serveReports mounts reportHandler behind the middleware (the server side
// of the snippet in docs/guards.md).
func serveReports(guard fence.Guard, mux *http.ServeMux, reportHandler http.Handler) error {
	fenced, err := httpguard.Middleware(guard, httpguard.Config{})
	if err != nil {
		return err
	}
	mux.Handle("PUT /reports/", fenced(reportHandler))
	return nil
}

// putReport sends body to url fenced on "reports/q3" under the claim ctx
// carries (the client side of the snippet in docs/guards.md).
func putReport(ctx context.Context, url string, body io.Reader) error {
	client := &http.Client{Transport: &httpguard.Transport{}}
	// ctx is the lease's context: the Transport sends its claim (token and run).
	req, err := http.NewRequestWithContext(httpguard.WithResource(ctx, "reports/q3"), http.MethodPut, url, body)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err // fence.ErrNoToken, or the lease's cause once ctx ended
	}
	defer resp.Body.Close()
	if err := httpguard.ErrorFromResponse(resp); err != nil {
		return err // *fence.StaleError or *fence.ReusedError on 409
	}
	return nil
}

// The client and server of docs/guards.md: run A (token 8) writes; the
// same token from run B is refused as a reuse, a context without a claim
// sends nothing, and an ended context reports its cause.
func Example_claims() {
	g, err := memguard.New(memguard.Config{})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	if err := serveReports(g, mux, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := fence.ClaimFromContext(r.Context())
		fmt.Printf("handler: token %d, run %s\n", c.Token, c.Run)
	})); err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	url := srv.URL + "/reports/q3"

	runA := fence.WithClaim(context.Background(), fence.Claim{Token: 8, Run: "run-a"})
	fmt.Println("A:", putReport(runA, url, strings.NewReader("A's report")))
	runB := fence.WithClaim(context.Background(), fence.Claim{Token: 8, Run: "run-b"})
	err = putReport(runB, url, strings.NewReader("B's report"))
	if re, ok := fence.IsReused(err); ok {
		fmt.Printf("B: token %d reused (mark set by %s)\n", re.Token, re.MarkRun)
	}
	fmt.Println("no claim:", errors.Is(putReport(context.Background(), url, nil), fence.ErrNoToken))
	lost := errors.New("lease lost")
	ended, cancel := context.WithCancelCause(runA)
	cancel(lost)
	fmt.Println("ended:", errors.Is(putReport(ended, url, nil), lost))
	// Output:
	// handler: token 8, run run-a
	// A: <nil>
	// B: token 8 reused (mark set by run-a)
	// no claim: true
	// ended: true
}
