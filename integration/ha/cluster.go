package ha

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/netproxy"
)

// PGVersion is the PostgreSQL major version whose binaries Patroni runs.
const PGVersion = "15"

// dirPrefix starts the name of every harness directory (under os.TempDir),
// followed by the creating process's id, so that Sweep can tell abandoned
// ones.
const dirPrefix = "fencekit-ha-"

// Timing of the Patroni clusters: a leader key lives ttl seconds and is
// renewed every loop_wait, so a lost leader is replaced within about
// ttl + loop_wait; Patroni requires ttl >= loop_wait + 2 × retry_timeout.
const (
	patroniTTL   = 8
	patroniLoop  = 1
	patroniRetry = 3
)

// Available reports whether Patroni, etcd and the PostgreSQL binaries are
// installed (scripts/install-ha.sh installs the first two).
func Available() error {
	for _, tool := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("ha: %s not found (run scripts/install-ha.sh)", tool)
		}
	}
	for _, b := range []string{"postgres", "pg_ctl", "initdb", "pg_basebackup"} {
		if _, err := os.Stat(pgBin(b)); err != nil {
			return fmt.Errorf("ha: %s: %w (install postgresql-%s)", pgBin(b), err, PGVersion)
		}
	}
	return nil
}

func pgBin(name string) string {
	return filepath.Join("/usr/lib/postgresql", PGVersion, "bin", name)
}

// Require fails the test under CI and skips it otherwise when the tools are
// missing.
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		fencetest.Missing(t, "%v", err)
	}
}

// Options configures New.
type Options struct {
	// Sync turns on Patroni's synchronous_mode.
	Sync bool
	// HAProxy starts an HAProxy in front of both nodes that routes to the
	// one whose Patroni REST API answers 200 on /primary (checked every
	// 500 ms, down after 2 failures, up after 1 success); ProxyURL
	// connects through it.
	HAProxy bool
}

// Cluster is one etcd member and two Patroni nodes on loopback ports,
// everything under one private directory.
type Cluster struct {
	t       testing.TB
	Dir     string
	Scope   string
	etcdURL string
	etcd    *proc
	haproxy *proc
	// HAProxyPort is HAProxy's client port (0 without Options.HAProxy).
	HAProxyPort int
	Nodes       []*Node
	cred        *syscall.Credential // postgres when running as root
	http        *http.Client
}

// Node is one Patroni member and its PostgreSQL.
type Node struct {
	Name    string
	PGPort  int // PostgreSQL, what clients connect to
	APIPort int // Patroni's REST API
	DataDir string
	// Link carries the node's replication traffic: its Patroni
	// connect_address, so that standbys stream through it and a test can
	// stall or cut replication without touching clients.
	Link   *netproxy.Proxy
	conf   string
	log    string
	proc   *proc
	killed bool
}

// proc is a started process in its own process group.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// kill sends SIGKILL to the process group and waits for the leader to exit.
func (p *proc) kill() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
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

// New starts etcd and two Patroni nodes (node0 bootstraps the cluster and
// leads, node1 streams from it) and waits until node0 accepts writes and
// node1 is a running replica (the synchronous one with Options.Sync).
// Everything is stopped and removed when the test ends, also on failure:
// process groups are killed and the directory removed.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	Require(t)
	Sweep()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		t.Fatalf("ha: %v", err)
	}
	c := &Cluster{t: t, Dir: dir, Scope: filepath.Base(dir), http: &http.Client{Timeout: 2 * time.Second}}
	t.Cleanup(c.cleanup)
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("ha: running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("ha: %v", err)
		}
	}
	c.startEtcd()
	for i := range 2 {
		c.Nodes = append(c.Nodes, c.newNode(i, opts))
	}
	c.startNode(c.Nodes[0])
	c.WaitPrimary(c.Nodes[0], 90*time.Second)
	c.startNode(c.Nodes[1])
	c.waitREST(c.Nodes[1], "/replica", 90*time.Second)
	if opts.Sync {
		c.waitREST(c.Nodes[1], "/sync", 30*time.Second)
	}
	if opts.HAProxy {
		c.startHAProxy()
	}
	return c
}

func (c *Cluster) startHAProxy() {
	c.t.Helper()
	var err error
	if c.HAProxyPort, err = freePort(); err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	var servers strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&servers, "    server %s 127.0.0.1:%d check port %d inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions\n", n.Name, n.PGPort, n.APIPort)
	}
	conf := fmt.Sprintf(`global
    maxconn 200
defaults
    mode tcp
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 1s
listen postgres
    bind 127.0.0.1:%d
    option httpchk GET /primary
    http-check expect status 200
    default-server init-addr last,libc,none
%s`, c.HAProxyPort, servers.String())
	path := filepath.Join(c.Dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	c.haproxy = c.start("haproxy", nil, false, filepath.Join(c.Dir, "haproxy.log"), "-db", "-f", path)
	// Servers start up before their first check: wait until five
	// connections in a row land on the primary.
	c.waitFor(30*time.Second, "HAProxy to route to the primary only", func() bool {
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conn, err := pgx.Connect(ctx, c.ProxyURL())
			if err != nil {
				cancel()
				return false
			}
			var rec bool
			err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec)
			_ = conn.Close(ctx)
			cancel()
			if err != nil || rec {
				return false
			}
		}
		return true
	})
}

// ProxyURL is a client URL through HAProxy (Options.HAProxy), database
// "postgres".
func (c *Cluster) ProxyURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", c.HAProxyPort)
}

func (c *Cluster) start(name string, env []string, asPostgres bool, logPath string, args ...string) *proc {
	c.t.Helper()
	logf, err := os.Create(logPath) //nolint:gosec // a path under the harness directory
	if err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	cmd := exec.Command(name, args...) //nolint:gosec,noctx // the harness's own fixed programs; stopped by killing the group
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if asPostgres && c.cred != nil {
		cmd.SysProcAttr.Credential = c.cred
		if err := os.Chown(logPath, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			c.t.Fatalf("ha: %v", err)
		}
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		c.t.Fatalf("ha: start %s: %v", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p
}

func (c *Cluster) startEtcd() {
	c.t.Helper()
	cp, err := freePort()
	if err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	pp, err := freePort()
	if err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	c.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	c.etcd = c.start("etcd", nil, false, filepath.Join(c.Dir, "etcd.log"),
		"--name", "fk", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "fk="+peer, "--initial-cluster-state", "new",
		"--initial-cluster-token", c.Scope, "--log-level", "warn")
	c.waitFor(30*time.Second, "etcd healthy", func() bool {
		resp, err := c.get(c.etcdURL + "/health")
		return err == nil && resp == http.StatusOK
	})
}

func (c *Cluster) newNode(i int, opts Options) *Node {
	c.t.Helper()
	n := &Node{Name: fmt.Sprintf("node%d", i), DataDir: filepath.Join(c.Dir, fmt.Sprintf("node%d", i))}
	var err error
	if n.PGPort, err = freePort(); err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	if n.APIPort, err = freePort(); err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	if n.Link, err = netproxy.New(fmt.Sprintf("127.0.0.1:%d", n.PGPort)); err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	n.conf = filepath.Join(c.Dir, n.Name+".yml")
	n.log = filepath.Join(c.Dir, n.Name+".log")
	conf := fmt.Sprintf(`scope: %[1]s
namespace: /fencekit-ha/
name: %[2]s
restapi:
  listen: 127.0.0.1:%[3]d
  connect_address: 127.0.0.1:%[3]d
etcd3:
  hosts: %[4]s
bootstrap:
  dcs:
    ttl: %[5]d
    loop_wait: %[6]d
    retry_timeout: %[7]d
    maximum_lag_on_failover: 1048576
    synchronous_mode: %[8]t
    postgresql:
      use_pg_rewind: false
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 5
        max_replication_slots: 5
        wal_keep_size: 64MB
  initdb:
  - encoding: UTF8
  - auth: trust
  - no-sync
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:%[9]d
  connect_address: %[10]s
  data_dir: %[11]s
  bin_dir: %[12]s
  pgpass: %[13]s
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: %[14]s
    max_connections: 60
    shared_buffers: 32MB
    fsync: "off"
    log_min_messages: warning
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
`, c.Scope, n.Name, n.APIPort, strings.TrimPrefix(c.etcdURL, "http://"), patroniTTL, patroniLoop, patroniRetry, opts.Sync,
		n.PGPort, n.Link.Addr(), n.DataDir, filepath.Dir(pgBin("postgres")), filepath.Join(c.Dir, n.Name+".pgpass"), c.Dir)
	if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	if c.cred != nil {
		if err := os.Chown(n.conf, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			c.t.Fatalf("ha: %v", err)
		}
	}
	return n
}

func (c *Cluster) startNode(n *Node) {
	c.t.Helper()
	n.proc = c.start("patroni", []string{"PYTHONUNBUFFERED=1"}, true, n.log, n.conf)
}

// URL is a client URL over both nodes (target_session_attrs=read-write:
// libpq-style clients try the hosts in order and keep the one that accepts
// writes), for database "postgres".
func (c *Cluster) URL() string {
	var hosts []string
	for _, n := range c.Nodes {
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", n.PGPort))
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}

// NodeURL is a client URL of one node only.
func (n *Node) NodeURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", n.PGPort)
}
