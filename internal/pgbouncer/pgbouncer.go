// Package pgbouncer runs private PgBouncer processes in front of a
// PostgreSQL server, for tests and benchmarks: each on a free loopback
// port, with its own configuration in a temporary directory, trust
// authentication, and the pool mode the caller asks for. It never touches
// the Debian package's own service or configuration.
//
// Guaranteed: Stop ends the process (SIGTERM, then SIGKILL) and removes
// its directory; the process also gets SIGTERM when the process that
// started it dies (Linux parent-death signal), so a crashed test leaves no
// PgBouncer behind, and the next Start removes the directories such
// processes left. Not guaranteed: TLS, authentication other than trust,
// or a port that stays free between choosing it and PgBouncer binding it
// (Start retries on another port when binding fails).
package pgbouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pool modes (PgBouncer's pool_mode).
const (
	ModeSession     = "session"
	ModeTransaction = "transaction"
)

// ErrNotInstalled is returned by Start when no pgbouncer binary is found
// (install the Debian package pgbouncer: scripts/install-pgbouncer.sh).
var ErrNotInstalled = errors.New("pgbouncer: binary not found (run scripts/install-pgbouncer.sh)")

// Config configures Start.
type Config struct {
	// UpstreamHost and UpstreamPort locate the PostgreSQL server. Required.
	UpstreamHost string
	UpstreamPort uint16
	// User is the role clients log in as (trust on both sides). Required.
	User string
	// Mode is ModeSession or ModeTransaction. Required.
	Mode string
	// PoolSize is default_pool_size: server connections per database and
	// user. Default 20.
	PoolSize int
}

// Server is one running PgBouncer.
type Server struct {
	// Host and Port are where clients connect.
	Host string
	Port uint16
	Mode string

	cmd      *exec.Cmd
	dir      string
	log      *lockedBuffer
	done     chan struct{}
	stopOnce sync.Once
	stopErr  error
}

// Bin returns the path of the pgbouncer binary, or ErrNotInstalled.
func Bin() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Start starts a PgBouncer and waits until it accepts connections to
// database db. Stop it with Stop.
func Start(ctx context.Context, cfg Config, db string) (*Server, error) {
	if cfg.UpstreamHost == "" || cfg.UpstreamPort == 0 || cfg.User == "" {
		return nil, errors.New("pgbouncer: UpstreamHost, UpstreamPort and User are required")
	}
	if cfg.Mode != ModeSession && cfg.Mode != ModeTransaction {
		return nil, fmt.Errorf("pgbouncer: mode %q (want %q or %q)", cfg.Mode, ModeSession, ModeTransaction)
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 20
	}
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		s, err := start(ctx, bin, cfg, db)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string, cfg Config, db string) (*Server, error) {
	port, err := freePort(ctx)
	if err != nil {
		return nil, err
	}
	sweep()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, err
	}
	// PgBouncer refuses to run as root; it runs as the postgres user then,
	// which must read the directory.
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // the files hold no secret: trust authentication on loopback
		_ = os.RemoveAll(dir)
		return nil, err
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
server_lifetime = 3600
ignore_startup_parameters = extra_float_digits,options
log_connections = 0
log_disconnections = 0
`, cfg.UpstreamHost, cfg.UpstreamPort, port, filepath.Join(dir, "users.txt"), cfg.Mode, cfg.PoolSize)
	files := map[string]string{
		"pgbouncer.ini": ini,
		"users.txt":     strconv.Quote(cfg.User) + ` ""` + "\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil { //nolint:gosec // readable by the postgres user; no secret
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	// Not CommandContext: the process outlives Start's ctx; Stop ends it.
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini")) //nolint:gosec,noctx // bin comes from Bin
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if os.Geteuid() == 0 {
		cred, err := postgresCredential()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		attr.Credential = cred
	}
	cmd.SysProcAttr = attr
	logBuf := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logBuf, logBuf
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: start: %w", err)
	}
	s := &Server{Host: "127.0.0.1", Port: port, Mode: cfg.Mode, cmd: cmd, dir: dir, log: logBuf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx, cfg.User, db); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("%w; log:\n%s", err, s.Log())
	}
	return s, nil
}

// waitReady connects through the PgBouncer until a SELECT 1 succeeds.
func (s *Server) waitReady(ctx context.Context, user, db string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cc, err := pgx.ParseConfig(s.URL(user, db))
	if err != nil {
		return err
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	for {
		select {
		case <-s.done:
			return errors.New("pgbouncer: exited during start")
		default:
		}
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer: not ready: %w", err)
		case <-s.done:
			return errors.New("pgbouncer: exited during start")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// URL is a connection URL through this PgBouncer.
func (s *Server) URL(user, db string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", user, net.JoinHostPort(s.Host, strconv.Itoa(int(s.Port))), db)
}

// Log returns what PgBouncer has logged so far.
func (s *Server) Log() string { return s.log.String() }

// Stop ends the process (SIGTERM; SIGKILL after 5 s) and removes its
// directory. It is idempotent.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		}
		s.stopErr = os.RemoveAll(s.dir)
	})
	return s.stopErr
}

// dirPrefix starts the name of every directory Start creates, followed by
// the creating process's id.
const dirPrefix = "fencekit-pgbouncer-"

// sweep removes the directories of processes that are gone (a test killed
// before its cleanup ran; its PgBouncer got the parent-death signal).
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), dirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// postgresCredential is the postgres user's uid and gid.
func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: running as root needs a postgres user to run PgBouncer as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func freePort(ctx context.Context) (uint16, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port), nil //nolint:gosec // a TCP port fits
}

// lockedBuffer collects the process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 { // keep the first MiB
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.b.String())
}
