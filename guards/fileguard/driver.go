//go:build unix

package fileguard

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// driver is the Guard's part of the engine's fenced write.
type driver Guard

// attempt is one write under resource's lock: the paths held open from
// the lock to the rename, and the mark read under the lock.
type attempt struct {
	g        *Guard
	resource string
	root     dir
	state    dir
	lockf    *os.File
	parent   dir      // fd -1: the resource's directories are missing
	cur      *os.File // the resource's file, open from the mark's read to the rename; nil: none
	m        mark
	closers  []func()
}

// Open takes resource's lock and reads its mark from the file's header,
// each path opened below the directory held before it (see path.go).
func (d *driver) Open(ctx context.Context, resource string, _ engine.Read) (_ engine.Attempt, err error) {
	g := (*Guard)(d)
	a := &attempt{g: g, resource: resource}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if a.root, err = g.openRoot(); err != nil {
		return nil, fmt.Errorf("fileguard: write %q: %w", resource, err)
	}
	a.closers = append(a.closers, a.root.close)
	if a.state, err = g.openDir(resource, a.root, StateDir, true, false); err != nil {
		return nil, g.pathError(resource, "lock", err)
	}
	a.closers = append(a.closers, a.state.close)
	if a.lockf, err = g.lock(ctx, a.state, resource); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { _ = a.lockf.Close() }) // closing releases the lock
	if err := g.at("locked"); err != nil {
		return nil, err
	}
	dirs, name := split(resource)
	a.parent, err = g.walk(resource, a.root, dirs, false, false)
	switch {
	case err == nil:
		parent := a.parent
		a.closers = append(a.closers, func() { parent.closeUnless(a.root) })
	case errors.Is(err, fs.ErrNotExist): // created by Commit
		a.parent = dir{fd: -1}
	default:
		return nil, g.pathError(resource, "write", err)
	}
	if a.parent.fd >= 0 {
		a.cur, _, err = g.openFile(resource, a.parent, name, unix.O_RDONLY, 0)
		switch {
		case err == nil:
			a.closers = append(a.closers, func() { _ = a.cur.Close() })
			if a.m, err = g.readHeader(resource, a.cur); err != nil {
				return nil, err
			}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, g.pathError(resource, "write", err)
		}
	}
	return a, nil
}

func (a *attempt) Mark() (fence.Claim, bool, bool) {
	return fence.Claim{Token: a.m.info.Token, Run: a.m.info.Run}, true, false
}

// Close releases the paths and the lock, in reverse order.
func (a *attempt) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// Settle is never called: a local write has no lost reply.
func (a *attempt) Settle(_ context.Context, _ fence.Claim, _ engine.Change, _ string, lost error) (engine.Result, error) {
	return engine.Failed, lost
}

// Commit writes the header and ch's content to a temporary file, syncs
// it, renames it over the resource's file and syncs the directory. A
// mark-only change carries the content over, or a tombstone when the
// resource has none.
func (a *attempt) Commit(ctx context.Context, c fence.Claim, ch engine.Change, _ string) (engine.Result, error) {
	if err := a.commit(ctx, c, ch); err != nil {
		return engine.Failed, err
	}
	return engine.Committed, nil
}

func (a *attempt) commit(ctx context.Context, c fence.Claim, ch engine.Change) error {
	g, resource, m := a.g, a.resource, a.m
	k, value := kindValue, ch.Value
	switch {
	case ch.Op == engine.OpDelete:
		k, value = kindDeleted, nil
	case ch.Op == engine.OpMark && m.kind != kindValue: // a tombstone, or no file: no content
		k, value = kindDeleted, nil
	case ch.Op == engine.OpMark:
		var err error
		if value, err = g.body(resource, a.cur, m); err != nil {
			return err
		}
	}
	tok, run := fence.NextMark(c, m.info.Token, m.info.Run)
	tmp, err := g.openDir(resource, a.state, "tmp", true, false)
	if err != nil {
		return g.pathError(resource, "write", err)
	}
	defer tmp.close()
	tf, tname, err := g.createTemp(resource, a.lockf, tmp)
	if err != nil {
		return g.pathError(resource, "write", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = unix.Unlinkat(tmp.fd, tname, 0)
		}
	}()
	if err := g.writeTemp(tf, append(encodeHeader(fence.Claim{Token: tok, Run: run}, k), value...)); err != nil {
		return fmt.Errorf("fileguard: write %q: %w", resource, err)
	}
	if err := g.at("synced"); err != nil {
		return err
	}
	parent := a.parent
	dirs, name := split(resource)
	if parent.fd < 0 {
		// The resource's directories were missing: create them, syncing
		// the parent of each one created, so a machine crash after the
		// write returned cannot lose the path to it.
		if parent, err = g.walk(resource, a.root, dirs, true, true); err != nil {
			return g.pathError(resource, "write", err)
		}
		defer parent.closeUnless(a.root)
	}
	// The commit point. Both names are single entries of directories held
	// open, so nothing is resolved through a link created meanwhile.
	if err := ignoringEINTR(func() error { return unix.Renameat(tmp.fd, tname, parent.fd, name) }); err != nil {
		return fmt.Errorf("fileguard: write %q: %w", resource,
			&fs.PathError{Op: "rename", Path: filepath.Join(parent.path, name), Err: err})
	}
	renamed = true
	if err := g.at("renamed"); err != nil {
		return outcomeUnknown(ctx, resource, err)
	}
	if err := ignoringEINTR(func() error { return unix.Fsync(parent.fd) }); err != nil {
		return outcomeUnknown(ctx, resource, &fs.PathError{Op: "fsync", Path: parent.path, Err: err})
	}
	return g.at("done")
}

// pathError types the error of opening a path of resource: an
// *UnsafePathError as it is, a regular file where a directory is needed
// or a directory where a file is needed as a *fence.ForeignError, anything else
// wrapped with op and resource.
func (g *Guard) pathError(resource, op string, err error) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, ErrUnsafePath):
		return err
	case errors.Is(err, unix.ENOTDIR) && errors.As(err, &pe):
		return &fence.ForeignError{Source: "fileguard", Resource: resource, Key: pe.Path, Reason: "a regular file where a directory is needed"}
	case errors.Is(err, unix.EISDIR) && errors.As(err, &pe):
		return &fence.ForeignError{Source: "fileguard", Resource: resource, Key: pe.Path, Reason: "a directory (it holds other resources)"}
	}
	return fmt.Errorf("fileguard: %s %q: %w", op, resource, err)
}

// tempNameLen is the length of a temporary file's name: 32 hexadecimal
// digits and ".tmp".
const tempNameLen = 36

func newTempName() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:]) + ".tmp"
}

func isTempName(b []byte) bool {
	if len(b) != tempNameLen || !bytes.HasSuffix(b, []byte(".tmp")) {
		return false
	}
	_, err := hex.DecodeString(string(b[:tempNameLen-4]))
	return err == nil
}

// createTemp creates the write's temporary file in tmp (StateDir/tmp) with
// a new random name, O_EXCL and O_NOFOLLOW, so it never opens a file that
// exists, nor follows a link. Its name is recorded in the resource's lock
// file first: a writer killed before its rename leaves the file behind,
// and the next writer of the resource (the only one that can hold the lock
// then) removes the file the record names.
func (g *Guard) createTemp(resource string, lockf *os.File, tmp dir) (*os.File, string, error) {
	var rec [tempNameLen]byte
	if n, _ := lockf.ReadAt(rec[:], 0); n == tempNameLen && isTempName(rec[:]) {
		// A crashed writer's leftover, or (usually) a name a completed
		// write already renamed away: ENOENT.
		_ = unix.Unlinkat(tmp.fd, string(rec[:]), 0)
	}
	var err error
	for range 3 {
		name := newTempName()
		if _, err = lockf.WriteAt([]byte(name), 0); err != nil {
			return nil, "", err
		}
		var f *os.File
		f, _, err = g.openFile(resource, tmp, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, g.perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, name, err
		}
	}
	return nil, "", err
}

// writeTemp writes b to the new temporary file f, syncs and closes it.
func (g *Guard) writeTemp(f *os.File, b []byte) error {
	half := len(b) / 2
	_, err := f.Write(b[:half])
	if err == nil {
		err = g.at("partial")
	}
	if err == nil {
		_, err = f.Write(b[half:])
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lock takes resource's lock file (flock, exclusive), waiting until ctx
// ends or LockTimeout passes, and returns it open: closing it releases
// the lock. Lock files are created with LockPerm and never removed (see
// the package documentation).
func (g *Guard) lock(ctx context.Context, state dir, resource string) (*os.File, error) {
	dirs, name := split(resource)
	d, err := g.walk(resource, state, append([]string{"lock"}, dirs...), true, false)
	if err != nil {
		return nil, g.pathError(resource, "lock", err)
	}
	f, st, err := g.openFile(resource, d, name, unix.O_RDWR|unix.O_CREAT, g.lockPerm)
	d.close()
	if err != nil {
		return nil, g.pathError(resource, "lock", err)
	}
	if st.Nlink != 1 {
		// The lock file holds the name of the temporary file, written in
		// place: never write into a file that has another name elsewhere.
		_ = f.Close()
		return nil, &UnsafePathError{Resource: resource, Path: f.Name(), Reason: fmt.Sprintf("a lock file with %d hard links", st.Nlink)}
	}
	fd := int(f.Fd()) //nolint:gosec // a file descriptor fits an int
	if fs.FileMode(st.Mode)&fs.ModePerm&^g.lockPerm != 0 {
		// Created with broader permissions (by Perm, before LockPerm
		// existed, or by a guard with another LockPerm): narrow them when
		// this process may; a file of another user stays as it is.
		_ = unix.Fchmod(fd, uint32(g.lockPerm))
	}
	var deadline time.Time
	if g.lockTimeout > 0 {
		deadline = time.Now().Add(g.lockTimeout)
	}
	wait := 50 * time.Microsecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("fileguard: lock %q: %w", resource, err)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("fileguard: lock %q: held by another writer for %v: %w", resource, g.lockTimeout, fence.ErrBusy)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, fence.WrapContext(ctx, fmt.Errorf("fileguard: lock %q: %w", resource, ctx.Err()))
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
}
