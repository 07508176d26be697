package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/mcpfence"
)

// runDemo tells the two-devices story over MCP: the desktop and the browser
// are two MCP clients (Go SDK, streamable HTTP) of one conversation; the
// browser continues here while the desktop is paused mid-call; the
// desktop's late write and its next call are refused, and both are told who
// owns the conversation. Then both send the same e-mail: the desktop, paused
// mid-call again, is refused when it records the mail late; one mail
// arrives.
func runDemo(ctx context.Context, notes *Notes, out io.Writer) error {
	if notes.mail == nil {
		return errNoMailer
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: notes.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)  //nolint:errcheck // ends with Close below
	defer srv.Close() //nolint:errcheck // demo teardown
	endpoint := "http://" + ln.Addr().String() + "/mcp"
	conv := "demo-" + uuid.NewString()[:8]
	say := func(who, format string, args ...any) {
		fmt.Fprintf(out, "%-8s %s\n", who, fmt.Sprintf(format, args...))
	}

	holding := make(chan struct{}, 1)
	ds, err := ConnectHTTP(ctx, endpoint, "desktop", "alice", func(*mcp.ProgressNotificationParams) {
		select {
		case holding <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer ds.Close() //nolint:errcheck // demo teardown
	bs, err := ConnectHTTP(ctx, endpoint, "browser", "alice", nil)
	if err != nil {
		return err
	}
	defer bs.Close() //nolint:errcheck // demo teardown
	desktop := &Device{Name: "desktop", Session: ds, Account: "acme", Conv: conv}
	browser := &Device{Name: "browser", Session: bs, Account: "acme", Conv: conv}
	say("", "conversation %s of account acme, server %s", conv, endpoint)

	res, err := desktop.Call(ctx, "append_note", map[string]any{"text": "draft from the desktop"}, StartRun, false, nil)
	if err != nil {
		return err
	}
	run := RunHandle(res)
	if run == "" {
		return fmt.Errorf("the desktop's first call started no run: %s", describe(res))
	}
	say("desktop", "append_note (run %s…): %s", run[:8], describe(res))

	type result struct {
		res *mcp.CallToolResult
		err error
	}
	late := make(chan result, 1)
	go func() {
		r, err := desktop.Call(ctx, "append_note", map[string]any{"text": "late draft from the desktop", "stall": true}, run, false, "stall")
		late <- result{r, err}
	}()
	select {
	case <-holding:
	case <-ctx.Done():
		return ctx.Err()
	}
	say("desktop", "append_note in flight; the desktop is paused mid-call")

	res, err = browser.Call(ctx, "continue_here", map[string]any{"text": "final from the browser"}, StartRun, false, nil)
	if err != nil {
		return err
	}
	brun := RunHandle(res)
	say("browser", "continue_here: %s", describe(res))
	var fails []string
	if res.IsError {
		fails = append(fails, "the browser's continue_here failed")
	}

	lr := <-late
	if lr.err != nil {
		return lr.err
	}
	say("desktop", "its late write: %s", describe(lr.res))
	if r, ok := mcpfence.RefusalFrom(lr.res); !ok || r.Cause != mcpfence.CauseStale {
		fails = append(fails, "the desktop's late write was not refused as stale")
	}
	res, err = desktop.Call(ctx, "append_note", map[string]any{"text": "next step from the desktop"}, run, false, nil)
	if err != nil {
		return err
	}
	say("desktop", "its next call in the run: %s", describe(res))
	if r, ok := mcpfence.RefusalFrom(res); !ok || r.Cause != mcpfence.CauseTakenOver || r.Owner == nil || r.Owner.Holder != "browser" {
		fails = append(fails, "the desktop's next call was not refused as taken_over by the browser")
	}

	res, err = browser.Call(ctx, "append_note", map[string]any{"text": "and a last word from the browser"}, brun, true, nil)
	if err != nil {
		return err
	}
	say("browser", "append_note, the run's last call: %s", describe(res))
	if res.IsError {
		fails = append(fails, "the browser's last call failed")
	}

	res, err = browser.Call(ctx, "read_notes", nil, "", false, nil)
	if err != nil {
		return err
	}
	var ro ReadOut
	if b, err := json.Marshal(res.StructuredContent); err == nil {
		_ = json.Unmarshal(b, &ro)
	}
	for _, n := range ro.Notes {
		say("notes", "%q by %s under token %d", n.Body, n.Author, n.Token)
	}
	if len(ro.Notes) != 3 {
		fails = append(fails, fmt.Sprintf("%d notes stored, want 3 (the desktop's draft and the browser's two)", len(ro.Notes)))
	}
	fails = append(fails, demoEmail(ctx, desktop, browser, holding, say)...)
	if len(fails) > 0 {
		return fmt.Errorf("demo checks failed: %v", fails)
	}
	say("", "ok: one conversation, two devices, the late call refused, both told who owns it; one e-mail sent")
	return nil
}

// describe renders a tool result in one line.
func describe(res *mcp.CallToolResult) string {
	if r, ok := mcpfence.RefusalFrom(res); ok {
		s := "refused: " + r.Cause
		if r.Cause == mcpfence.CauseStale {
			s += fmt.Sprintf(" (token %d, the resource has accepted %d)", r.Presented, r.Highest)
		}
		if r.Owner != nil && r.Owner.Held {
			s += fmt.Sprintf("; owner %q with token %d", r.Owner.Holder, r.Owner.Token)
		} else if r.Owner != nil {
			s += fmt.Sprintf("; last taken by %q with token %d (released)", r.Owner.Holder, r.Owner.Token)
		}
		return s
	}
	if res.IsError {
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				return "error: " + t.Text
			}
		}
		return "error"
	}
	var li mcpfence.LeaseInfo
	if v, ok := res.Meta[mcpfence.MetaLease]; ok {
		b, _ := json.Marshal(v)
		_ = json.Unmarshal(b, &li)
		return fmt.Sprintf("ok under token %d, owner %q", li.Token, li.Holder)
	}
	return "ok"
}

// demoEmail: the desktop starts a run whose send_email pauses mid-call; the
// browser continues here and sends the e-mail; the desktop's late
// send_email is refused when it records (stale), and one mail arrives
// (counted in Mailpit when TEST_MAILPIT_API is set). It returns the failed
// checks.
func demoEmail(ctx context.Context, desktop, browser *Device, holding <-chan struct{}, say func(who, format string, args ...any)) []string {
	var fails []string
	subject := "minutes of " + desktop.Conv
	args := func(stall bool) map[string]any {
		return map[string]any{"to": "ann@example.test", "subject": subject, "body": "The minutes.", "stall": stall}
	}
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	late := make(chan result, 1)
	go func() {
		r, err := desktop.Call(ctx, "send_email", args(true), StartRun, false, "mail")
		late <- result{r, err}
	}()
	select {
	case <-holding:
	case <-ctx.Done():
		return []string{ctx.Err().Error()}
	}
	say("desktop", "send_email %q in flight (new run); the desktop is paused mid-call", subject)
	res, err := browser.Call(ctx, "continue_here", nil, StartRun, false, nil)
	if err != nil {
		return []string{err.Error()}
	}
	brun := RunHandle(res)
	say("browser", "continue_here: %s", describe(res))
	res, err = browser.Call(ctx, "send_email", args(false), brun, true, nil)
	if err != nil {
		return []string{err.Error()}
	}
	var out MailOut
	if b, err := json.Marshal(res.StructuredContent); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	say("browser", "send_email: %s; the mail is %s", describe(res), out.State)
	if res.IsError || out.State != "delivered" {
		fails = append(fails, "the browser's e-mail was not delivered")
	}
	lr := <-late
	if lr.err != nil {
		return append(fails, lr.err.Error())
	}
	say("desktop", "its late send_email: %s", describe(lr.res))
	if r, ok := mcpfence.RefusalFrom(lr.res); !ok || r.Cause != mcpfence.CauseStale {
		fails = append(fails, "the desktop's late send_email was not refused as stale")
	}
	if api := os.Getenv("TEST_MAILPIT_API"); api != "" {
		n, err := mailpitMessages(ctx, api, subject)
		if err != nil {
			return append(fails, err.Error())
		}
		say("mailpit", "%d message(s) with subject %q", n, subject)
		if n != 1 {
			fails = append(fails, fmt.Sprintf("Mailpit holds %d messages, want 1", n))
		}
	}
	return fails
}

// mailpitMessages counts the messages with subject in the Mailpit whose
// HTTP API is api.
func mailpitMessages(ctx context.Context, api, subject string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/api/v1/search?query="+url.QueryEscape(`subject:"`+subject+`"`), nil) //nolint:gosec // the operator's own Mailpit (TEST_MAILPIT_API)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req) //nolint:gosec // the operator's own Mailpit (TEST_MAILPIT_API)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("mailpit search: %s", resp.Status)
	}
	var found struct {
		Messages []struct {
			Subject string `json:"Subject"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&found); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range found.Messages {
		if m.Subject == subject {
			n++
		}
	}
	return n, nil
}
