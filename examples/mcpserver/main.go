// Command mcpserver is an MCP server whose side-effecting tools are fenced
// with fencekit leases (package mcpfence): notes of a conversation, written
// as PostgreSQL rows through pgguard and as a file through fileguard. Two
// devices (MCP clients) of one conversation cannot both write: "continue
// here" on one ends the other's run, whose late writes the guards refuse.
// send_email sends mail through package effects: recorded only under the
// call's current lease claim, delivered once by the server's relay (-smtp).
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run . -http 127.0.0.1:8808
//	DATABASE_URL=... go run . -user alice          # stdio, for a client that starts it
//	DATABASE_URL=... go run . demo                 # two clients, one conversation (make demo-mcp)
//
// Over HTTP the bearer token is the user's name (a stand-in for real
// auth); -members says which accounts each user belongs to.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var sub string
	if len(args) > 0 && args[0] == "demo" {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("mcpserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", "", "serve streamable HTTP on this address (default: stdio)")
	schema := fs.String("schema", "mcpnotes", "PostgreSQL schema of fencekit's tables and the notes")
	dir := fs.String("dir", "", "directory of the fileguard files (default: a new temporary directory)")
	members := fs.String("members", "alice=acme,bob=acme,mallory=other", "user=account,... memberships")
	user := fs.String("user", "alice", "stdio: the user this process runs for")
	ttl := fs.Duration("ttl", 0, "lease TTL (0: fencekit's default)")
	smtpAddr := fs.String("smtp", smtpFromEnv(), "SMTP server host:port of the send_email tool (default $SMTP_ADDR, else $TEST_SMTP_ADDR; empty: no send_email)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = os.Getenv("TEST_DATABASE_URL")
	}
	if url == "" {
		return errors.New("set DATABASE_URL")
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "mcpnotes-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d) //nolint:errcheck // best effort
		*dir = d
	}
	ms, err := parseMembers(*members)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	notes, err := NewNotes(ctx, pool, Options{Schema: *schema, Dir: *dir, Members: ms, User: *user, TTL: *ttl, Logger: logger, SMTP: *smtpAddr})
	if err != nil {
		return err
	}
	defer func() { //nolint:contextcheck // Close releases under its own bounded context
		if cerr := notes.Close(); cerr != nil {
			logger.Warn("closing the notes server", "err", cerr)
		}
	}()

	switch {
	case sub == "demo":
		return runDemo(ctx, notes, stdout)
	case *httpAddr != "":
		ln, err := new(net.ListenConfig).Listen(ctx, "tcp", *httpAddr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "listening on http://%s/mcp\n", ln.Addr())
		srv := &http.Server{Handler: notes.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if serr := srv.Shutdown(sctx); serr != nil {
				logger.Warn("shutting the HTTP server down", "err", serr)
			}
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	default:
		return notes.Server().Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}})
	}
}

// HTTPHandler serves the notes over streamable HTTP at /mcp, behind bearer
// auth (the token names the user, a stand-in for an OAuth verifier), for
// both MCP revisions: 2026-07-28 statelessly, 2025-11-25 with sessions
// (mcpfence's Fence.HTTPHandler, which also ends a call whose client left).
func (n *Notes) HTTPHandler() http.Handler {
	server := n.Server()
	h := n.Fence.HTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token == "" {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: token, Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, nil)(h))
	return mux
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func parseMembers(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, p := range strings.Split(s, ",") {
		if p == "" {
			continue
		}
		u, a, ok := strings.Cut(p, "=")
		if !ok || u == "" || a == "" {
			return nil, fmt.Errorf("-members: %q is not user=account", p)
		}
		out[u] = append(out[u], a)
	}
	return out, nil
}
