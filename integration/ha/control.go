package ha

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func (c *Cluster) get(url string) (int, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Status is Patroni's GET /patroni answer (the fields used here).
type Status struct {
	State    string `json:"state"`
	Role     string `json:"role"`
	Timeline int    `json:"timeline"`
}

// Status asks the node's REST API.
func (c *Cluster) Status(n *Node) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/patroni", n.APIPort), nil)
	if err != nil {
		return st, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return st, err
	}
	defer func() { _ = resp.Body.Close() }()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

func (c *Cluster) waitREST(n *Node, path string, d time.Duration) {
	c.t.Helper()
	c.waitFor(d, n.Name+" "+path, func() bool {
		code, err := c.get(fmt.Sprintf("http://127.0.0.1:%d%s", n.APIPort, path))
		return err == nil && code == http.StatusOK
	})
}

// WaitPrimary waits until Patroni reports n as the running leader.
func (c *Cluster) WaitPrimary(n *Node, d time.Duration) {
	c.t.Helper()
	c.waitREST(n, "/primary", d)
}

// Primary returns the node Patroni reports as the running leader, or nil.
func (c *Cluster) Primary() *Node {
	for _, n := range c.Nodes {
		if n.killed {
			continue
		}
		if code, err := c.get(fmt.Sprintf("http://127.0.0.1:%d/primary", n.APIPort)); err == nil && code == http.StatusOK {
			return n
		}
	}
	return nil
}

// Other returns the node that is not n.
func (c *Cluster) Other(n *Node) *Node {
	if c.Nodes[0] == n {
		return c.Nodes[1]
	}
	return c.Nodes[0]
}

// postmasterPID reads the node's postmaster.pid (0 when there is none).
func (n *Node) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(n.DataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// CrashPostmaster sends SIGKILL to the node's postmaster only (Patroni goes
// on running and restarts it). It returns the killed pid.
func (c *Cluster) CrashPostmaster(n *Node) int {
	c.t.Helper()
	pid := n.postmasterPID()
	if pid == 0 {
		c.t.Fatalf("ha: %s has no postmaster.pid", n.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("ha: kill postmaster %d: %v", pid, err)
	}
	return pid
}

// KillNode kills the node's Patroni and its PostgreSQL (every process of
// both groups) at once: the leader is lost without a word to etcd.
func (c *Cluster) KillNode(n *Node) {
	c.t.Helper()
	pm := n.postmasterPID()
	n.proc.kill()
	killPostmasterGroup(pm)
	n.killed = true
}

func killPostmasterGroup(pid int) {
	if pid <= 0 {
		return
	}
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// Switchover asks Patroni (REST POST /switchover) to hand leadership from
// leader to candidate.
func (c *Cluster) Switchover(leader, candidate *Node) {
	c.t.Helper()
	body, _ := json.Marshal(map[string]string{"leader": leader.Name, "candidate": candidate.Name})
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost,
		fmt.Sprintf("http://127.0.0.1:%d/switchover", leader.APIPort), bytes.NewReader(body))
	if err != nil {
		c.t.Fatalf("ha: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	cl := &http.Client{Timeout: 60 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		c.t.Fatalf("ha: switchover: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var msg bytes.Buffer
	_, _ = msg.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("ha: switchover: HTTP %d: %s", resp.StatusCode, msg.String())
	}
}

func (c *Cluster) waitFor(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.dumpLogs()
			c.t.Fatalf("ha: timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
