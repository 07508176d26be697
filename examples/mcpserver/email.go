package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/mail"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/mcpfence"
)

// The send_email tool: an effect on a target that cannot check a fencing
// token (an SMTP server), recorded through package effects only while the
// call's lease claim is the conversation's current grant, and delivered by
// the server's relay at most once.

// MetaRequest is the _meta key of a tools/call request naming the call
// (mcpfence.MetaRequest, a string the client chooses, at most
// effects.MaxRequestKeyLen bytes for send_email): a client retrying the call
// sends the same value, the Fence answers the copy with the first call's
// result, and send_email records the mail under it as its request key.
// Without it the request key is derived from the arguments, so the same
// e-mail (recipient, subject, body) is sent once per conversation.
const MetaRequest = mcpfence.MetaRequest

// mailTarget is the effects target name of the server's SMTP server.
const mailTarget = "smtp"

// Limits of send_email's input.
const (
	maxSubjectBytes = 200
	maxBodyBytes    = 64 << 10
)

// mailer records and delivers send_email's mails.
type mailer struct {
	outbox *effects.Outbox
	relay  *effects.Relay
	from   string
	await  time.Duration // how long a call waits for its mail's outcome
}

// newMailer builds the outbox of the SMTP target at addr in schema (the
// lease schema) and starts its relay; stop stops it.
func newMailer(ctx context.Context, n *Notes, addr string, logger *slog.Logger) (*mailer, error) {
	out, err := effects.New(effects.Config{Pool: n.Pool, Schema: n.Schema, Logger: logger,
		Targets: []effects.Target{{Name: mailTarget, AtMostOnce: true, Deliverer: &effects.SMTP{Addr: addr}}}})
	if err != nil {
		return nil, err
	}
	relay, err := effects.NewRelay(out, effects.RelayConfig{})
	if err != nil {
		return nil, err
	}
	if err := relay.Start(ctx); err != nil {
		return nil, err
	}
	return &mailer{outbox: out, relay: relay, from: "notes@fencekit.example", await: 10 * time.Second}, nil
}

// stop stops the relay (attempts in flight end; their effects stay
// recorded for the next relay). Safe on a nil mailer.
func (m *mailer) stop() error {
	if m == nil {
		return nil
	}
	return m.relay.Stop()
}

// addMailTools adds send_email to s when the server has an SMTP server.
func (n *Notes) addMailTools(s *mcp.Server) {
	if n.mail == nil {
		return
	}
	mcp.AddTool(s, &mcp.Tool{Name: "send_email", Description: "Send an e-mail, once per conversation and request " +
		"(_meta " + MetaRequest + ", or the arguments); refused when another device took the conversation over."}, n.sendEmail)
}

// MailIn is send_email's input. Stall is a demo knob: a device paused
// mid-call, which wakes after its lease ended and tries to send anyway.
type MailIn struct {
	To      string `json:"to" jsonschema:"the recipient's address"`
	Subject string `json:"subject" jsonschema:"the subject line"`
	Body    string `json:"body,omitempty" jsonschema:"the plain-text body"`
	Stall   bool   `json:"stall,omitempty" jsonschema:"demo: a paused device: try to send after the lease ended"`
}

// MailOut is send_email's result: the recorded effect and its state when
// the call returned (delivered, rejected, ambiguous: sent or not, unknown;
// pending or sending when the outcome was not known yet).
type MailOut struct {
	EffectID   string `json:"effect_id"`
	RequestKey string `json:"request_key"`
	State      string `json:"state"`
	Detail     string `json:"detail,omitempty"`
	Token      int64  `json:"token"` // the lease's fencing token the mail was recorded under
}

func (n *Notes) sendEmail(ctx context.Context, req *mcp.CallToolRequest, in MailIn) (*mcp.CallToolResult, MailOut, error) {
	claim, err := fence.ClaimFromContext(ctx) // the lease's claim, put there by mcpfence
	if err != nil {
		return nil, MailOut{}, err
	}
	frozen, err := n.mail.freeze(in)
	if err != nil {
		return nil, MailOut{}, err
	}
	rk, err := requestKey(req, in)
	if err != nil {
		return nil, MailOut{}, err
	}
	if in.Stall {
		if tok := req.Params.GetProgressToken(); tok != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: "holding", Progress: 1})
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		ctx = context.WithoutCancel(ctx) // a paused device wakes up late, its claim still in ctx
	}
	// Recorded only while the claim is the conversation's current grant
	// (checked against the lease row in the same transaction); a displaced
	// run's record fails with fence.ErrStale, which mcpfence reports as a
	// stale refusal.
	id, err := n.mail.outbox.Record(ctx, effects.Effect{Target: mailTarget, RequestKey: rk, Request: frozen})
	if err != nil {
		return nil, MailOut{}, err
	}
	out := MailOut{EffectID: id.String(), RequestKey: rk, State: string(effects.StatePending), Token: int64(claim.Token)}
	actx, cancel := context.WithTimeout(ctx, n.mail.await)
	defer cancel()
	info, err := n.mail.outbox.Await(actx, id)
	switch {
	case err == nil:
		out.State, out.Detail = string(info.State), info.Detail
	case actx.Err() != nil:
		// The mail is recorded and the relay delivers it; the call just
		// stopped waiting (its ctx ended, or n.mail.await passed).
		out.Detail = "recorded; the outcome was not known when the call returned"
	default:
		return nil, MailOut{}, err
	}
	return nil, out, nil
}

// freeze validates in and builds the frozen Mail: the same input always
// gives the same bytes, so a retried call finds its first record.
func (m *mailer) freeze(in MailIn) ([]byte, error) {
	to, err := mail.ParseAddress(in.To)
	if err != nil {
		return nil, &effects.InputError{Field: "to", Reason: fmt.Sprintf("%q is not one e-mail address", shortArg(in.To))}
	}
	switch {
	case in.Subject == "":
		return nil, &effects.InputError{Field: "subject", Reason: "empty"}
	case len(in.Subject) > maxSubjectBytes:
		return nil, &effects.InputError{Field: "subject", Reason: fmt.Sprintf("%d bytes, limit %d", len(in.Subject), maxSubjectBytes)}
	case !utf8.ValidString(in.Subject) || strings.ContainsAny(in.Subject, "\r\n\x00"):
		return nil, &effects.InputError{Field: "subject", Reason: "not one line of UTF-8"}
	case len(in.Body) > maxBodyBytes:
		return nil, &effects.InputError{Field: "body", Reason: fmt.Sprintf("%d bytes, limit %d", len(in.Body), maxBodyBytes)}
	case !utf8.ValidString(in.Body) || strings.ContainsRune(in.Body, 0):
		return nil, &effects.InputError{Field: "body", Reason: "not UTF-8 text"}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\n", m.from)
	fmt.Fprintf(&b, "To: %s\r\n", to.String())
	fmt.Fprintf(&b, "Subject: %s\r\n", mime.QEncoding.Encode("utf-8", in.Subject))
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n")
	b.WriteString(strings.ReplaceAll(strings.ReplaceAll(in.Body, "\r\n", "\n"), "\n", "\r\n"))
	b.WriteString("\r\n")
	return effects.Mail{From: m.from, To: []string{to.Address}, Data: []byte(b.String())}.Freeze()
}

// requestKey is the call's request key: _meta MetaRequest when the client
// sent one, else "args:" and a digest of the arguments.
func requestKey(req *mcp.CallToolRequest, in MailIn) (string, error) {
	if v, ok := req.Params.Meta[MetaRequest]; ok {
		s, isString := v.(string)
		if !isString {
			return "", &effects.InputError{Field: "_meta " + MetaRequest, Reason: fmt.Sprintf("want a string, got %T", v)}
		}
		if err := effects.ValidateRequestKey(s); err != nil {
			return "", fmt.Errorf("_meta %s: %w", MetaRequest, err)
		}
		return s, nil
	}
	b, err := json.Marshal([]string{in.To, in.Subject, in.Body})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "args:" + hex.EncodeToString(sum[:16]), nil
}

func shortArg(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// errNoMailer is returned by the demo when the server has no SMTP server.
var errNoMailer = errors.New("no SMTP server: set -smtp, SMTP_ADDR or TEST_SMTP_ADDR (make demo-mcp starts Mailpit)")

// smtpFromEnv is the -smtp flag's default: $SMTP_ADDR, else
// $TEST_SMTP_ADDR (scripts/services.sh's Mailpit).
func smtpFromEnv() string {
	if a := os.Getenv("SMTP_ADDR"); a != "" {
		return a
	}
	return os.Getenv("TEST_SMTP_ADDR")
}
