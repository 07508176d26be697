// Package pgcluster creates private PostgreSQL clusters for tests that must
// crash, restart, replicate or promote a server: primaries and streaming
// replicas made with the Debian tools (pg_createcluster, pg_basebackup -R,
// pg_ctlcluster) on free loopback ports, trust authentication on
// 127.0.0.1 only. It never touches a cluster it did not create: every
// cluster's name starts with NamePrefix and carries the creating process's
// id. Each cluster is dropped when the test ends (t.Cleanup), even on
// failure; New also drops clusters left by earlier runs whose process is
// gone. When the tools are missing, tests fail under CI=true and skip
// otherwise (fencetest.Missing).
//
// Not guaranteed: durability against an operating-system crash (initdb
// runs with --no-sync); clusters need root or the postgres user.
package pgcluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fencetest"
)

// Version is the PostgreSQL major version the clusters use.
const Version = "15"

// NamePrefix starts the name of every cluster this package creates.
const NamePrefix = "fkt_"

// Cluster is one private PostgreSQL cluster.
type Cluster struct {
	Name string
	Port int
	t    testing.TB
}

// Options configures New.
type Options struct {
	// Settings are extra postgresql.conf lines (e.g. "synchronous_commit = on").
	Settings []string
}

// Available reports whether the Debian PostgreSQL tools are installed.
func Available() error {
	for _, tool := range []string{"pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "pg_lsclusters"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("pgcluster: %s not found (install postgresql-common and postgresql-%s)", tool, Version)
		}
	}
	for _, tool := range []string{"pg_basebackup", "pg_dump", "pg_restore"} {
		if _, err := os.Stat(Bin(tool)); err != nil {
			return fmt.Errorf("pgcluster: %s: %w", Bin(tool), err)
		}
	}
	return nil
}

// Bin is the path of a PostgreSQL program of Version.
func Bin(name string) string { return filepath.Join("/usr/lib/postgresql", Version, "bin", name) }

// Require skips the test in -short mode; otherwise, when the tools are
// missing, it fails the test under CI and skips it elsewhere.
func Require(t testing.TB) {
	t.Helper()
	fencetest.SkipShort(t)
	if err := Available(); err != nil {
		fencetest.Missing(t, "%v", err)
	}
}

// run runs a command and returns its combined output, failing on error.
func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

func freePort() (int, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func newName() string {
	return fmt.Sprintf("%s%d_%s", NamePrefix, os.Getpid(), strings.TrimPrefix(fencetest.RandomName("x"), "x")[:8])
}

// Sweep drops clusters named NamePrefix<pid>_… whose process <pid> no
// longer exists (left by a crashed run). It returns the names dropped.
func Sweep(ctx context.Context) ([]string, error) {
	out, err := run(ctx, "pg_lsclusters", "--no-header")
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != Version || !strings.HasPrefix(f[1], NamePrefix) {
			continue
		}
		pidText, _, ok := strings.Cut(strings.TrimPrefix(f[1], NamePrefix), "_")
		pid, perr := strconv.Atoi(pidText)
		if !ok || perr != nil || processAlive(pid) {
			continue
		}
		if _, err := run(ctx, "pg_dropcluster", "--stop", Version, f[1]); err != nil {
			return dropped, err
		}
		dropped = append(dropped, f[1])
	}
	return dropped, nil
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func toolCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

// New creates and starts a primary. It is dropped when the test ends.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	Require(t)
	ctx, cancel := toolCtx()
	defer cancel()
	if _, err := Sweep(ctx); err != nil {
		t.Fatalf("pgcluster: sweep stale clusters: %v", err)
	}
	c := create(t, func(name string, port int) []string {
		return []string{Version, name, "-p", strconv.Itoa(port), "--", "--no-sync", "--auth=trust"}
	}, nil)
	c.configure(opts.Settings)
	c.Start()
	return c
}

func create(t testing.TB, args func(name string, port int) []string, before func(name string) error) *Cluster {
	t.Helper()
	ctx, cancel := toolCtx()
	defer cancel()
	port, err := freePort()
	if err != nil {
		t.Fatalf("pgcluster: free port: %v", err)
	}
	c := &Cluster{Name: newName(), Port: port, t: t}
	t.Cleanup(func() {
		ctx, cancel := toolCtx()
		defer cancel()
		if _, err := run(ctx, "pg_dropcluster", "--stop", Version, c.Name); err != nil && !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("pgcluster: drop %s: %v", c.Name, err)
		}
		_ = os.RemoveAll(c.DataDir()) // a half-made replica's base backup
	})
	if before != nil {
		if err := before(c.Name); err != nil {
			t.Fatalf("pgcluster: %v", err)
		}
	}
	if _, err := run(ctx, "pg_createcluster", args(c.Name, port)...); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	return c
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string {
	return filepath.Join("/var/lib/postgresql", Version, c.Name)
}

func (c *Cluster) confDir() string { return filepath.Join("/etc/postgresql", Version, c.Name) }

func (c *Cluster) configure(settings []string) {
	c.t.Helper()
	conf := append([]string{
		"listen_addresses = '127.0.0.1'",
		"max_wal_senders = 5",
		"wal_level = replica",
		"max_connections = 60",
		"shared_buffers = 32MB",
		"wal_keep_size = 64MB",
		"fsync = off", // operating-system crashes are out of scope; stop -m immediate keeps the page cache
		"log_min_messages = warning",
	}, settings...)
	path := filepath.Join(c.confDir(), "conf.d", "fencekit_test.conf")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // read by the postgres user
		c.t.Fatalf("pgcluster: %v", err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil { //nolint:gosec // read by the postgres user
		c.t.Fatalf("pgcluster: %v", err)
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nlocal replication all trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(c.confDir(), "pg_hba.conf"), []byte(hba), 0o644); err != nil { //nolint:gosec // read by the postgres user
		c.t.Fatalf("pgcluster: %v", err)
	}
}

// Set appends postgresql.conf lines to the cluster's fencekit settings; they
// take effect at the next Start or Reload.
func (c *Cluster) Set(lines ...string) {
	c.t.Helper()
	path := filepath.Join(c.confDir(), "conf.d", "fencekit_test.conf")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o644) //nolint:gosec // read by the postgres user
	if err == nil {
		_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		c.t.Fatalf("pgcluster: %v", err)
	}
}

func (c *Cluster) ctl(action string, extra ...string) {
	c.t.Helper()
	ctx, cancel := toolCtx()
	defer cancel()
	args := append([]string{"--skip-systemctl-redirect", Version, c.Name, action}, extra...)
	if _, err := run(ctx, "pg_ctlcluster", args...); err != nil {
		c.t.Fatalf("pgcluster: %v", err)
	}
}

// Start starts the cluster and waits until it accepts connections.
func (c *Cluster) Start() { c.t.Helper(); c.ctl("start") }

// Reload re-reads the configuration.
func (c *Cluster) Reload() { c.t.Helper(); c.ctl("reload") }

// Kill stops the cluster with -m immediate: no shutdown checkpoint, every
// connection dropped, as a crash.
func (c *Cluster) Kill() { c.t.Helper(); c.ctl("stop", "-m", "immediate") }

// Promote promotes a replica and waits until it accepts writes.
func (c *Cluster) Promote() {
	c.t.Helper()
	c.ctl("promote")
	pool := c.Pool("postgres")
	deadline := time.Now().Add(time.Minute)
	for {
		var rec bool
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := pool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec)
		cancel()
		if err == nil && !rec {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("pgcluster: %s still in recovery after promote (%v)", c.Name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL is a connection string for database db on the cluster.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Pool opens an independent pool to database db, closed when the test ends.
func (c *Cluster) Pool(db string) *pgxpool.Pool {
	c.t.Helper()
	return fencetest.PoolWith(c.t, c.URL(db), func(cfg *pgxpool.Config) {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	})
}

// CreateDatabase creates database name.
func (c *Cluster) CreateDatabase(name string) {
	c.t.Helper()
	ctx, cancel := toolCtx()
	defer cancel()
	if _, err := c.Pool("postgres").Exec(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		c.t.Fatalf("pgcluster: create database %s: %v", name, err)
	}
}

// Replica creates a streaming replica of c whose upstream connection goes
// to host:port (c's own address, or a proxy in front of it), from a fresh
// pg_basebackup -R, and starts it. It is dropped when the test ends.
func (c *Cluster) Replica(host string, port int, opts Options) *Cluster {
	c.t.Helper()
	var dir string
	r := create(c.t, func(name string, port int) []string {
		return []string{Version, name, "-p", strconv.Itoa(port), "-d", dir}
	}, func(name string) error {
		dir = filepath.Join("/var/lib/postgresql", Version, name)
		ctx, cancel := toolCtx()
		defer cancel()
		if _, err := run(ctx, Bin("pg_basebackup"), "-h", host, "-p", strconv.Itoa(port), "-U", "postgres",
			"-D", dir, "-R", "-X", "stream", "--no-sync", "-c", "fast"); err != nil {
			return err
		}
		// pg_createcluster integrates a data directory that holds its
		// configuration files: start from the primary's.
		for _, f := range []string{"postgresql.conf", "pg_hba.conf", "pg_ident.conf"} {
			b, err := os.ReadFile(filepath.Join(c.confDir(), f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
				return err
			}
		}
		if _, err := run(ctx, "chown", "-R", "postgres:postgres", dir); err != nil {
			return err
		}
		return os.Chmod(dir, 0o700) //nolint:gosec // a data directory: PostgreSQL requires 0700 or 0750
	})
	r.configure(opts.Settings)
	r.Start()
	return r
}

// Dump runs pg_dump -Fc of database db into a file in the test's temporary
// directory and returns its path.
func (c *Cluster) Dump(db string) string {
	c.t.Helper()
	ctx, cancel := toolCtx()
	defer cancel()
	path := filepath.Join(c.t.TempDir(), db+".dump")
	if _, err := run(ctx, Bin("pg_dump"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres", "-Fc", "-f", path, db); err != nil {
		c.t.Fatalf("pgcluster: %v", err)
	}
	return path
}

// Restore runs pg_restore of a Dump file into database db (which must exist).
func (c *Cluster) Restore(path, db string) {
	c.t.Helper()
	ctx, cancel := toolCtx()
	defer cancel()
	if _, err := run(ctx, Bin("pg_restore"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres",
		"--exit-on-error", "-d", db, path); err != nil {
		c.t.Fatalf("pgcluster: %v", err)
	}
}

// Restart stops the cluster with -m immediate (a crash: no shutdown
// checkpoint, connections dropped) and starts it again. Unlike the other
// methods it returns its error instead of failing the test, so that it may
// run outside the test's goroutine.
func (c *Cluster) Restart(ctx context.Context) error {
	for _, args := range [][]string{{"stop", "-m", "immediate"}, {"start"}} {
		if _, err := run(ctx, "pg_ctlcluster", append([]string{"--skip-systemctl-redirect", Version, c.Name}, args...)...); err != nil {
			return err
		}
	}
	return nil
}
