package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// needMailpit returns the Mailpit HTTP API of scripts/services.sh; the
// test fails under CI=true when Mailpit is not configured.
func needMailpit(t *testing.T) string {
	t.Helper()
	fencetest.SkipShort(t)
	if os.Getenv("TEST_SMTP_ADDR") == "" || os.Getenv("TEST_MAILPIT_API") == "" {
		fencetest.Missing(t, "TEST_SMTP_ADDR / TEST_MAILPIT_API not set (scripts/services.sh starts Mailpit)")
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	return os.Getenv("TEST_MAILPIT_API")
}

// mailpitCount is how many messages Mailpit holds whose subject is subject.
func mailpitCount(t *testing.T, api, subject string) int {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/search?query=" + url.QueryEscape(`subject:"`+subject+`"`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("mailpit search: %s", resp.Status)
	}
	var out struct {
		Messages []struct {
			Subject string `json:"Subject"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range out.Messages {
		if m.Subject == subject {
			n++
		}
	}
	return n
}

// effectRows counts the conversation's recorded effects.
func effectRows(t *testing.T, e *env, conv string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{e.schema, "fencekit_effects"}.Sanitize()+
		" WHERE session_id = $1", conv).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// callMail calls send_email in d's conversation, with _meta MetaRequest
// when requestKey is not empty.
func callMail(t *testing.T, d *Device, args map[string]any, run, requestKey string, progress any) (*mcp.CallToolResult, error) {
	t.Helper()
	meta := mcp.Meta{mcpfence.MetaAccount: d.Account, mcpfence.MetaConversation: d.Conv}
	RunMeta(meta, run, false)
	if requestKey != "" {
		meta[MetaRequest] = requestKey
	}
	p := &mcp.CallToolParams{Meta: meta, Name: "send_email", Arguments: args}
	if progress != nil {
		p.SetProgressToken(progress)
	}
	return d.Session.CallTool(t.Context(), p)
}

func mailOut(t *testing.T, what string, res *mcp.CallToolResult, err error) MailOut {
	t.Helper()
	mustOK(t, what, res, err)
	var out MailOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || out.EffectID == "" {
		t.Fatalf("%s: structured content %s: %v", what, b, err)
	}
	return out
}

// TestSendEmailTwoDevicesOnce: the desktop and the browser of one
// conversation both send the same e-mail at once; a call refused because
// the other device held the conversation is retried, as a client would.
// Both end with the same effect, delivered, and Mailpit holds one message.
func TestSendEmailTwoDevicesOnce(t *testing.T) {
	api := needMailpit(t)
	transports(t, func(t *testing.T, e *env) {
		conv := "mail-" + uuid.NewString()[:8]
		subject := "minutes " + uuid.NewString()
		args := map[string]any{"to": "ann@example.test", "subject": subject, "body": "The minutes of today."}
		devices := []*Device{
			{Name: "desktop", Session: e.connect(t, "desktop", "alice", nil), Account: "acme", Conv: conv},
			{Name: "browser", Session: e.connect(t, "browser", "alice", nil), Account: "acme", Conv: conv},
		}
		outs := make(chan MailOut, 2)
		fails := make(chan string, 2)
		for _, d := range devices {
			go func() {
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					res, err := callMail(t, d, args, "", "", nil)
					if r, ok := mcpfence.RefusalFrom(res); ok && err == nil && r.Cause == mcpfence.CauseHeld {
						continue // the other device holds the conversation: retry
					}
					if err != nil || res.IsError {
						fails <- d.Name + ": " + describe(res)
						return
					}
					var out MailOut
					b, _ := json.Marshal(res.StructuredContent)
					_ = json.Unmarshal(b, &out)
					outs <- out
					return
				}
				fails <- d.Name + ": still held after 30 s"
			}()
		}
		var got []MailOut
		for range devices {
			select {
			case o := <-outs:
				got = append(got, o)
			case f := <-fails:
				t.Fatal(f)
			}
		}
		if got[0].EffectID != got[1].EffectID {
			t.Errorf("two effects for one e-mail: %+v", got)
		}
		for _, o := range got {
			if o.State != "delivered" {
				t.Errorf("state %q (%s), want delivered", o.State, o.Detail)
			}
		}
		if n := effectRows(t, e, conv); n != 1 {
			t.Errorf("%d effects recorded, want 1", n)
		}
		if n := mailpitCount(t, api, subject); n != 1 {
			t.Errorf("Mailpit holds %d messages %q, want 1", n, subject)
		}
	})
}

// TestSendEmailLateCallRefused: the desktop's send_email is paused while
// the browser continues here and sends the same e-mail; the desktop's late
// record is refused as stale, it records nothing, and Mailpit holds the
// browser's message only.
func TestSendEmailLateCallRefused(t *testing.T) {
	api := needMailpit(t)
	transports(t, func(t *testing.T, e *env) {
		conv := "mail-" + uuid.NewString()[:8]
		subject := "offer " + uuid.NewString()
		lateSubject := "late offer " + uuid.NewString()
		pr := newProgress()
		desktop := &Device{Name: "desktop", Session: e.connect(t, "desktop", "alice", pr.handle), Account: "acme", Conv: conv}
		browser := &Device{Name: "browser", Session: e.connect(t, "browser", "alice", nil), Account: "acme", Conv: conv}

		run := StartRun
		type result struct {
			res *mcp.CallToolResult
			err error
		}
		late := make(chan result, 1)
		go func() {
			res, err := callMail(t, desktop, map[string]any{"to": "bob@example.test", "subject": lateSubject, "body": "late", "stall": true}, run, "", "stall")
			late <- result{res, err}
		}()
		pr.await(t, "stall", 1)

		res, err := browser.Call(t.Context(), "continue_here", nil, StartRun, false, nil)
		mustOK(t, "browser continue_here", res, err)
		brun := RunHandle(res)
		res, err = callMail(t, browser, map[string]any{"to": "bob@example.test", "subject": subject, "body": "final"}, brun, "", nil)
		out := mailOut(t, "browser send_email", res, err)
		if out.State != "delivered" {
			t.Errorf("browser's mail %q (%s), want delivered", out.State, out.Detail)
		}

		lr := <-late
		r := mustRefusal(t, "desktop's late send_email", lr.res, lr.err, mcpfence.CauseStale)
		if r.Presented == 0 || r.Presented >= r.Highest {
			t.Errorf("stale refusal: presented %d, highest %d", r.Presented, r.Highest)
		}
		if r.Owner == nil || r.Owner.Holder != "browser" {
			t.Errorf("stale refusal names owner %+v, want the browser", r.Owner)
		}
		if n := effectRows(t, e, conv); n != 1 {
			t.Errorf("%d effects recorded, want 1 (the browser's)", n)
		}
		if n := mailpitCount(t, api, subject); n != 1 {
			t.Errorf("Mailpit holds %d messages %q, want 1", n, subject)
		}
		if n := mailpitCount(t, api, lateSubject); n != 0 {
			t.Errorf("Mailpit holds %d messages of the refused late call, want 0", n)
		}
	})
}

// TestSendEmailRetrySameRequestKey: a call retried with the same _meta
// request key gets the first call's result, records nothing new and sends
// once; the same key with another body is refused (request_conflict) and
// sends nothing; another key sends a second copy.
func TestSendEmailRetrySameRequestKey(t *testing.T) {
	api := needMailpit(t)
	transports(t, func(t *testing.T, e *env) {
		conv := "mail-" + uuid.NewString()[:8]
		subject := "receipt " + uuid.NewString()
		desktop := &Device{Name: "desktop", Session: e.connect(t, "desktop", "alice", nil), Account: "acme", Conv: conv}
		args := map[string]any{"to": "cy@example.test", "subject": subject, "body": "Thank you."}

		res, err := callMail(t, desktop, args, "", "receipt-1", nil)
		first := mailOut(t, "first call", res, err)
		res, err = callMail(t, desktop, args, "", "receipt-1", nil)
		retry := mailOut(t, "retried call", res, err)
		if first != retry || first.RequestKey != "receipt-1" || retry.State != "delivered" {
			t.Errorf("first %+v, retry %+v: want the first call's result, one delivered effect under receipt-1", first, retry)
		}
		res, err = callMail(t, desktop, map[string]any{"to": "cy@example.test", "subject": subject, "body": "Other."}, "", "receipt-1", nil)
		if r, ok := mcpfence.RefusalFrom(res); err != nil || !ok || r.Cause != mcpfence.CauseRequestConflict {
			t.Errorf("same key, other body: %v %s, want %s", err, describe(res), mcpfence.CauseRequestConflict)
		}
		if n := mailpitCount(t, api, subject); n != 1 {
			t.Errorf("Mailpit holds %d messages %q after the retry, want 1", n, subject)
		}
		res, err = callMail(t, desktop, args, "", "receipt-2", nil)
		second := mailOut(t, "another key", res, err)
		if second.EffectID == first.EffectID || second.State != "delivered" {
			t.Errorf("another key: %+v", second)
		}
		if n := mailpitCount(t, api, subject); n != 2 {
			t.Errorf("Mailpit holds %d messages %q, want 2 (two request keys)", n, subject)
		}
		if n := effectRows(t, e, conv); n != 2 {
			t.Errorf("%d effects recorded, want 2", n)
		}
	})
}

// TestMailRelayStopsWithServer: the relay NewNotes starts for send_email
// leaves no goroutine behind once the server is closed.
func TestMailRelayStopsWithServer(t *testing.T) {
	needMailpit(t)
	pool := fencetest.Pool(t)
	schema := fencetest.Schema(t, migrations.Lease, migrations.Guard)
	before := goleak.IgnoreCurrent()
	notes, err := NewNotes(t.Context(), pool, Options{Schema: schema, Dir: t.TempDir(), SMTP: os.Getenv("TEST_SMTP_ADDR")})
	if err != nil {
		t.Fatal(err)
	}
	if notes.mail == nil {
		t.Fatal("no mailer with an SMTP address")
	}
	if err := notes.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}
