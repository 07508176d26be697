package httpguard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

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
