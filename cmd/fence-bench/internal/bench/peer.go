package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Peer drives the pglock peer (the pglockpeer module beside this package):
// a subprocess that runs cirello.io/pglock lock cycles on command and
// reports how many it completed. The peer is a separate module, so the
// main module does not depend on pglock, and a separate process, because
// the main module cannot import the peer's; it is idle while the other
// sides of a comparison run.
type Peer struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	dir  string
	errs *strings.Builder
}

// StartPeer builds the peer module in dir with the go command and starts
// it against dbURL with pglock's table created as table (schema-qualified)
// and workers concurrent workers per run. It returns when the peer is
// ready.
func StartPeer(ctx context.Context, dir, dbURL, table string, workers int) (*Peer, error) {
	tmp, err := os.MkdirTemp("", "fence-bench-peer-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(tmp, "pglockpeer")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".") //nolint:gosec // bin is a fresh temporary path; dir is the operator's -peer flag
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("build pglock peer in %s: %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	cmd := exec.CommandContext(ctx, bin, "-db", dbURL, "-table", table, "-workers", strconv.Itoa(workers)) //nolint:gosec // the binary was just built from the repository
	p := &Peer{cmd: cmd, dir: tmp, errs: &strings.Builder{}}
	cmd.Stderr = p.errs
	if p.in, err = cmd.StdinPipe(); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	p.out = bufio.NewScanner(stdout)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	line, err := p.readLine()
	if err == nil && line != "ready" {
		err = fmt.Errorf("unexpected first line %q", line)
	}
	if err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("pglock peer did not start: %w: %s", err, strings.TrimSpace(p.errs.String()))
	}
	return p, nil
}

func (p *Peer) readLine() (string, error) {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return "", err
		}
		return "", io.ErrUnexpectedEOF
	}
	return p.out.Text(), nil
}

// Run asks the peer to cycle for d and returns the cycles it completed and
// the time they took, timed by the peer.
func (p *Peer) Run(d time.Duration) (int, time.Duration, error) {
	if _, err := fmt.Fprintf(p.in, "run %d\n", d.Nanoseconds()); err != nil {
		return 0, 0, err
	}
	line, err := p.readLine()
	if err != nil {
		return 0, 0, fmt.Errorf("pglock peer: %w: %s", err, strings.TrimSpace(p.errs.String()))
	}
	return ParsePeerReply(line)
}

// ParsePeerReply parses the peer's answer to a run: "ok <cycles>
// <elapsed ns>" or "err <message>".
func ParsePeerReply(line string) (int, time.Duration, error) {
	if msg, ok := strings.CutPrefix(line, "err "); ok {
		return 0, 0, fmt.Errorf("pglock peer: %s", msg)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ok" {
		return 0, 0, fmt.Errorf("pglock peer: malformed reply %q", line)
	}
	n, err1 := strconv.Atoi(f[1])
	ns, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || n < 0 || ns <= 0 {
		return 0, 0, fmt.Errorf("pglock peer: malformed reply %q", line)
	}
	return n, time.Duration(ns), nil
}

// Close stops the peer and removes its binary.
func (p *Peer) Close() error {
	_, _ = io.WriteString(p.in, "quit\n")
	_ = p.in.Close()
	err := p.cmd.Wait()
	_ = os.RemoveAll(p.dir)
	return err
}
