package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/fileguard"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Notes is the example's application: notes of a conversation, each written
// as a row (pgguard) and as the conversation's latest-note file (fileguard),
// by MCP tools fenced with the conversation's lease.
type Notes struct {
	Pool    *pgxpool.Pool
	Schema  string
	Manager *lease.Manager
	Fence   *mcpfence.Fence
	pg      *pgguard.Guard
	files   *fileguard.Guard
	members map[string][]string // user -> accounts
	user    string              // the stdio server's user (no HTTP auth there)
	mail    *mailer             // send_email's outbox and relay; nil without an SMTP server
}

// Options configures NewNotes.
type Options struct {
	Schema  string              // holds fencekit's tables and the notes table
	Dir     string              // the fileguard directory (must exist)
	Members map[string][]string // user -> the accounts they are a member of
	User    string              // stdio: the user the process runs for; HTTP takes it from the bearer token
	TTL     time.Duration       // the leases' TTL (0: lease.DefaultTTL)
	Logger  *slog.Logger
	SMTP    string // host:port of the SMTP server send_email's mail goes to ("": no send_email tool)
}

// NewNotes migrates opts.Schema and builds the Manager, the guards and the
// Fence. Close releases them.
func NewNotes(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Notes, error) {
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: opts.Schema}, migrations.Lease, migrations.Guard, migrations.Effects, migrations.MCP); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+pgx.Identifier{opts.Schema, "notes"}.Sanitize()+
		` (id bigserial PRIMARY KEY, account text NOT NULL, conversation text NOT NULL, author text NOT NULL,
		   body text NOT NULL, token bigint NOT NULL)`); err != nil {
		return nil, err
	}
	n := &Notes{Pool: pool, Schema: opts.Schema, members: opts.Members, user: opts.User}
	var err error
	if n.pg, err = pgguard.New(pgguard.Config{DB: pool, Schema: opts.Schema}); err != nil {
		return nil, err
	}
	if n.files, err = fileguard.New(fileguard.Config{Dir: opts.Dir}); err != nil {
		return nil, err
	}
	if n.Manager, err = lease.New(lease.Config{Pool: pool, Schema: opts.Schema, TTL: opts.TTL, Logger: opts.Logger}); err != nil {
		return nil, err
	}
	// --- fencing the server's tool calls -------------------------------
	n.Fence, err = mcpfence.New(mcpfence.Config{
		Manager:   n.Manager,
		Account:   mcpfence.FromMeta(mcpfence.MetaAccount), // the conversation's account
		Authorize: n.authorize,                             // the caller must be a member of it
		Tools: map[string]mcpfence.Policy{
			"read_notes":    mcpfence.Unfenced,     // read-only
			"append_note":   mcpfence.Acquire,      // refused while another run holds the conversation
			"queue_note":    mcpfence.Wait,         // waits its turn, with progress notifications
			"continue_here": mcpfence.ContinueHere, // the newest device wins
			"send_email":    mcpfence.Acquire,      // an effect recorded under the lease (email.go)
		},
		// Every name a conversation becomes in the tools, checked before
		// any lease statement: an id accepted here never fails after the
		// note was written.
		CheckKey: func(k lease.Key) error {
			if err := fence.ValidateResource(k.Resource("notes")); err != nil {
				return err
			}
			return fileguard.ValidateResource(k.Resource("latest-note.txt"))
		},
		// Calls that name a request id (_meta io.fencekit/request) are
		// answered once: a copy gets the first call's result, on any
		// replica.
		Requests:      pool,
		RequestSchema: opts.Schema,
		Logger:        opts.Logger,
	})
	if err != nil {
		return nil, errors.Join(err, n.Manager.Close()) //nolint:contextcheck // startup failed; Close releases nothing yet
	}
	if opts.SMTP != "" {
		if n.mail, err = newMailer(ctx, n, opts.SMTP, opts.Logger); err != nil {
			_ = n.Close() //nolint:contextcheck // startup failed: Close stops what was started under its own bounded context
			return nil, err
		}
	}
	return n, nil
}

// Server returns an MCP server with the notes tools, fenced by n.Fence.
func (n *Notes) Server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "fencekit-notes", Version: "v0.1.0"}, nil)
	s.AddReceivingMiddleware(n.Fence.Middleware)
	mcp.AddTool(s, &mcp.Tool{Name: "append_note", Description: "Append a note to the conversation (refused while another device holds it)."}, n.appendNote)
	mcp.AddTool(s, &mcp.Tool{Name: "queue_note", Description: "Append a note, waiting while another device holds the conversation."}, n.appendNote)
	mcp.AddTool(s, &mcp.Tool{Name: "continue_here", Description: "Take the conversation over on this device, then append the note if one is given."}, n.appendNote)
	mcp.AddTool(s, &mcp.Tool{Name: "read_notes", Description: "List the conversation's notes."}, n.readNotes)
	n.addMailTools(s)
	return s
}

// Close stops the Fence, the mail relay and the Manager (releasing their leases).
func (n *Notes) Close() error {
	return errors.Join(n.Fence.Close(), n.mail.stop(), n.Manager.Close()) //nolint:contextcheck // Close releases under its own bounded context
}

// user is the signed-in user: the bearer token's over HTTP, the process's
// over stdio.
func (n *Notes) userOf(req *mcp.CallToolRequest) string {
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		return req.Extra.TokenInfo.UserID
	}
	return n.user
}

func (n *Notes) authorize(_ context.Context, req *mcp.CallToolRequest, key lease.Key) error {
	u := n.userOf(req)
	if !slices.Contains(n.members[u], key.AccountID) {
		return fmt.Errorf("user %q is not a member of account %q", u, key.AccountID)
	}
	return nil
}

// NoteIn is the input of the writing tools. Hold and Stall are demo knobs
// that make a device slow: Hold keeps the call running until its lease ends
// (the call then returns its context's cause); Stall plays a device paused
// mid-call: once its lease has ended it waits for the new owner to write,
// then sends its write anyway, late, with its old token.
type NoteIn struct {
	Text  string `json:"text,omitempty" jsonschema:"the note"`
	Hold  bool   `json:"hold,omitempty" jsonschema:"demo: keep the call running until its lease ends"`
	Stall bool   `json:"stall,omitempty" jsonschema:"demo: a paused device: write late, after the new owner wrote"`
}

// NoteOut is the result of a writing tool.
type NoteOut struct {
	Written bool  `json:"written"`
	Token   int64 `json:"token"` // the lease's fencing token
}

func (n *Notes) appendNote(ctx context.Context, req *mcp.CallToolRequest, in NoteIn) (*mcp.CallToolResult, NoteOut, error) {
	claim, err := fence.ClaimFromContext(ctx) // the lease's claim, put there by mcpfence
	if err != nil {
		return nil, NoteOut{}, err
	}
	key, err := keyOf(ctx, req)
	if err != nil {
		return nil, NoteOut{}, err
	}
	if in.Hold || in.Stall {
		if tok := req.Params.GetProgressToken(); tok != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: "holding", Progress: 1})
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		if !in.Stall {
			return nil, NoteOut{}, context.Cause(ctx)
		}
		// A paused device wakes up late: the new owner has written by then.
		late := context.WithoutCancel(ctx)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if m, err := n.pg.Mark(late, key.Resource("notes")); err == nil && m.Token > claim.Token {
				break
			}
		}
		ctx = late
	}
	if in.Text == "" {
		return nil, NoteOut{Token: int64(claim.Token)}, nil
	}
	author := n.userOf(req)
	err = n.pg.InTx(ctx, key.Resource("notes"), func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{n.Schema, "notes"}.Sanitize()+
			" (account, conversation, author, body, token) VALUES ($1, $2, $3, $4, $5)",
			key.AccountID, key.SessionID, author, in.Text, int64(claim.Token))
		return err
	})
	if err != nil {
		return nil, NoteOut{}, err
	}
	if err := n.files.Put(ctx, key.Resource("latest-note.txt"), []byte(in.Text)); err != nil {
		return nil, NoteOut{}, err
	}
	return nil, NoteOut{Written: true, Token: int64(claim.Token)}, nil
}

// ReadOut is the result of read_notes.
type ReadOut struct {
	Notes []Note `json:"notes"`
}

// Note is one stored note.
type Note struct {
	Author string `json:"author"`
	Body   string `json:"body"`
	Token  int64  `json:"token"` // the token the note was written under
}

func (n *Notes) readNotes(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, ReadOut, error) {
	key, err := keyOf(ctx, req)
	if err != nil {
		return nil, ReadOut{}, err
	}
	if err := n.authorize(ctx, req, key); err != nil {
		return nil, ReadOut{}, err
	}
	rows, err := n.Pool.Query(ctx, "SELECT author, body, token FROM "+pgx.Identifier{n.Schema, "notes"}.Sanitize()+
		" WHERE account = $1 AND conversation = $2 ORDER BY id", key.AccountID, key.SessionID)
	if err != nil {
		return nil, ReadOut{}, err
	}
	out := ReadOut{Notes: []Note{}}
	for rows.Next() {
		var nt Note
		if err := rows.Scan(&nt.Author, &nt.Body, &nt.Token); err != nil {
			return nil, ReadOut{}, err
		}
		out.Notes = append(out.Notes, nt)
	}
	return nil, out, rows.Err()
}

// keyOf reads the conversation's key from the request's _meta, as the Fence
// does (read_notes is unfenced and reads it itself).
func keyOf(ctx context.Context, req *mcp.CallToolRequest) (lease.Key, error) {
	acct, err := mcpfence.FromMeta(mcpfence.MetaAccount)(ctx, req)
	if err != nil {
		return lease.Key{}, err
	}
	conv, err := mcpfence.FromMeta(mcpfence.MetaConversation)(ctx, req)
	if err != nil {
		return lease.Key{}, err
	}
	return lease.Key{AccountID: acct, SessionID: conv}, nil
}
