package ha

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// dumpLogs writes the tail of every log to the test output.
func (c *Cluster) dumpLogs() {
	for _, p := range append([]string{filepath.Join(c.Dir, "etcd.log"), filepath.Join(c.Dir, "haproxy.log")}, c.logPaths()...) {
		b, err := os.ReadFile(p) //nolint:gosec // harness log
		if err != nil {
			continue
		}
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		c.t.Logf("---- %s (tail)\n%s", filepath.Base(p), b)
	}
}

func (c *Cluster) logPaths() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.log)
	}
	return out
}

var cleanupMu sync.Mutex

// cleanup kills every process the harness started (Patroni groups, the
// postmasters' groups, etcd), closes the links and removes the directory.
func (c *Cluster) cleanup() {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	if c.t.Failed() {
		c.dumpLogs()
	}
	for _, n := range c.Nodes {
		pm := n.postmasterPID()
		n.proc.kill()
		killPostmasterGroup(pm)
		if n.Link != nil {
			_ = n.Link.Close()
		}
	}
	c.haproxy.kill()
	c.etcd.kill()
	killInDir(c.Dir)
	if err := os.RemoveAll(c.Dir); err != nil {
		c.t.Errorf("ha: remove %s: %v", c.Dir, err)
	}
}

// killInDir kills every process whose command line names dir (a postmaster
// restarted by Patroni after the harness last read its pid, or anything a
// crashed run left).
func killInDir(dir string) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 && pgid != syscall.Getpgrp() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Sweep removes harness directories (and kills their processes) left by
// runs whose process is gone.
func Sweep() {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || processAlive(pid) {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		killInDir(dir)
		_ = os.RemoveAll(dir)
	}
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil || !errors.Is(err, os.ErrNotExist)
}
