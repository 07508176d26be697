//go:build unix

package fileguard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
)

// StateDir is the directory inside Config.Dir that holds the lock files
// and the temporary files; no resource may start with it.
const StateDir = ".fencekit"

// header starts every file the guard writes.
const header = "fencekit-file/1 "

// maxHeader bounds the header line: the prefix, a 19-digit token, a
// 64-byte run and the kind, with their labels.
const maxHeader = 128

// maxSegment is the longest path segment (NAME_MAX on common file
// systems).
const maxSegment = 255

// Config configures a Guard. Dir is required.
type Config struct {
	// Dir is the directory the resources live in; it must exist. Each
	// resource is a file at Dir/<resource>.
	Dir string
	// Perm is the permission of the files written (before the umask).
	// Default 0o644. Directories are created with Perm plus the execute
	// bits of its readable classes.
	Perm fs.FileMode
	// LockTimeout, when positive, bounds how long a write waits for the
	// resource's lock held by another writer; then it fails with an error
	// matching fence.ErrBusy. Zero: wait until ctx ends.
	LockTimeout time.Duration
	// MeterProvider records the guard instruments of package guardobs with
	// guard="file". Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one span (guardobs.SpanWrite, a child of the
	// span in ctx) per write that got past the argument checks, and per call refused by them. Nil records none.
	TracerProvider trace.TracerProvider
	// Logger receives an Error record for every write refused because its
	// token was reused by another run. Nil discards.
	Logger *slog.Logger
	// Strict refuses, before any I/O, every write whose resource lies
	// outside its claim's scope (fence.CheckScope: a lease's claim is
	// scoped to its key, lease.Key.Scope), and every write whose claim has
	// no scope, with a *fence.ScopeError (fence.ErrOutOfScope): a claim for
	// one key can then never raise the mark of another key's resource.
	// Off by default: scopes are ignored.
	Strict bool
}

// Info describes a resource's mark: the claim of the last write admitted.
type Info struct {
	Token fence.Token
	Run   string
}

// Guard fences writes to files in one directory. It is safe for
// concurrent use, also with Guards in other processes on the same host
// over the same directory. It starts no goroutine and holds no open file
// between calls.
type Guard struct {
	dir         string
	perm        fs.FileMode
	dirPerm     fs.FileMode
	lockTimeout time.Duration
	strict      bool
	rec         *guardobs.Recorder

	step func(name string) error // tests: runs at each step of a write
}

// New validates cfg and returns a Guard. It checks that Dir is a
// directory; it writes nothing.
func New(cfg Config) (*Guard, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: Dir is empty", ErrInvalidConfig)
	}
	fi, err := os.Stat(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: Dir: %w", ErrInvalidConfig, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: Dir %s is not a directory", ErrInvalidConfig, cfg.Dir)
	}
	if cfg.Perm == 0 {
		cfg.Perm = 0o644
	}
	if cfg.Perm&^fs.ModePerm != 0 {
		return nil, fmt.Errorf("%w: Perm %v has bits beyond the permission bits", ErrInvalidConfig, cfg.Perm)
	}
	if cfg.LockTimeout < 0 {
		return nil, fmt.Errorf("%w: LockTimeout %v is negative", ErrInvalidConfig, cfg.LockTimeout)
	}
	rec, err := guardobs.New(guardobs.Config{Kind: guardobs.KindFile, Name: "fileguard",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	dirPerm := cfg.Perm | (cfg.Perm&0o444)>>2
	return &Guard{dir: cfg.Dir, perm: cfg.Perm, dirPerm: dirPerm, lockTimeout: cfg.LockTimeout, strict: cfg.Strict, rec: rec}, nil
}

// Dir returns the guard's directory.
func (g *Guard) Dir() string { return g.dir }

// Path returns the file that holds resource's content (with its header).
func (g *Guard) Path(resource string) string {
	return filepath.Join(g.dir, filepath.FromSlash(resource))
}

func (g *Guard) lockPath(resource string) string {
	return filepath.Join(g.dir, StateDir, "lock", filepath.FromSlash(resource))
}

func (g *Guard) tempPath(resource string) string {
	return filepath.Join(g.dir, StateDir, "tmp", filepath.FromSlash(resource))
}

// checkResource applies fence.ValidateResource and the rules of a path
// below Dir: segments separated by '/', none empty, ".", ".." or longer
// than 255 bytes, and the first not StateDir.
func checkResource(resource string) error {
	if err := fence.ValidateResource(resource); err != nil {
		return err
	}
	for i, seg := range strings.Split(resource, "/") {
		switch {
		case seg == "":
			return &ResourceError{Resource: resource, Reason: "empty path segment (leading, trailing or double '/')"}
		case seg == "." || seg == "..":
			return &ResourceError{Resource: resource, Reason: fmt.Sprintf("path segment %q", seg)}
		case len(seg) > maxSegment:
			return &ResourceError{Resource: resource, Reason: fmt.Sprintf("path segment of %d bytes, limit %d", len(seg), maxSegment)}
		case i == 0 && seg == StateDir:
			return &ResourceError{Resource: resource, Reason: "starts with the guard's state directory " + StateDir}
		}
	}
	return nil
}

// Put writes value as resource's content under the claim ctx carries
// (fence.ClaimFromContext; none: fence.ErrNoToken, nothing written).
func (g *Guard) Put(ctx context.Context, resource string, value []byte) error {
	c, err := g.ctxClaim(ctx, resource)
	if err != nil {
		return err
	}
	return g.write(ctx, resource, c, func(context.Context) (kind, []byte, error) { return kindValue, value, nil })
}

// PutClaim writes value as resource's content under the claim c, passed
// explicitly: under resource's lock, it reads the mark from the file's
// header, applies fence.DecideClaim, writes the header and value to a
// temporary file, syncs it, renames it over the resource's file and syncs
// the directory.
func (g *Guard) PutClaim(ctx context.Context, resource string, c fence.Claim, value []byte) error {
	if err := g.args(ctx, resource, c); err != nil {
		return err
	}
	return g.write(ctx, resource, c, func(context.Context) (kind, []byte, error) { return kindValue, value, nil })
}

// Delete replaces resource's content with a tombstone under the claim ctx
// carries: the mark stays, so older tokens are still refused.
func (g *Guard) Delete(ctx context.Context, resource string) error {
	c, err := g.ctxClaim(ctx, resource)
	if err != nil {
		return err
	}
	return g.write(ctx, resource, c, func(context.Context) (kind, []byte, error) { return kindDeleted, nil, nil })
}

// DeleteClaim is Delete under the claim c, passed explicitly.
func (g *Guard) DeleteClaim(ctx context.Context, resource string, c fence.Claim) error {
	if err := g.args(ctx, resource, c); err != nil {
		return err
	}
	return g.write(ctx, resource, c, func(context.Context) (kind, []byte, error) { return kindDeleted, nil, nil })
}

// Get returns resource's content and mark. A resource without a file (also
// one whose path is a directory holding other resources, as a's is when
// a/b was written; a itself cannot be written then), or with a tombstone,
// yields a *NotFoundError. Reads take no lock: a rename
// replaces a file whole, so a reader sees the old or the new one.
//
//nolint:gosec // G304/G703: every path here is below Dir, built from a resource checkResource validated (no "..", not absolute)
func (g *Guard) Get(ctx context.Context, resource string) ([]byte, Info, error) {
	if err := checkResource(resource); err != nil {
		return nil, Info{}, err
	}
	if err := fence.ContextError(ctx); err != nil {
		return nil, Info{}, err
	}
	b, err := os.ReadFile(g.Path(resource))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EISDIR) {
		return nil, Info{}, &NotFoundError{Resource: resource}
	}
	if err != nil {
		return nil, Info{}, fmt.Errorf("fileguard: read %q: %w", resource, err)
	}
	m, body, err := g.parse(resource, b)
	if err != nil {
		return nil, Info{}, err
	}
	if m.kind == kindDeleted {
		return nil, m.info, &NotFoundError{Resource: resource, Deleted: true, Token: m.info.Token}
	}
	return body, m.info, nil
}

// Mark returns resource's mark: the claim of its last admitted write, or
// the zero Claim when it has no file.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if err := checkResource(resource); err != nil {
		return fence.Claim{}, err
	}
	if err := fence.ContextError(ctx); err != nil {
		return fence.Claim{}, err
	}
	m, err := g.readMark(resource)
	return fence.Claim{Token: m.info.Token, Run: m.info.Run}, err
}

type kind byte

const (
	kindNone    kind = 0
	kindValue   kind = 'v'
	kindDeleted kind = 'd'
)

// mark is a file's header.
type mark struct {
	info Info
	kind kind
}

func encodeHeader(c fence.Claim, k kind) []byte {
	return fmt.Appendf(nil, "%st=%d r=%s k=%c\n", header, c.Token, c.Run, k)
}

// parse splits a file into its header and body.
func (g *Guard) parse(resource string, b []byte) (mark, []byte, error) {
	bad := func(reason string) (mark, []byte, error) {
		return mark{}, nil, &FileError{Resource: resource, Path: g.Path(resource), Reason: reason}
	}
	nl := bytes.IndexByte(b[:min(len(b), maxHeader)], '\n')
	if !bytes.HasPrefix(b, []byte(header)) || nl < 0 {
		return bad("no fileguard header")
	}
	f := strings.Split(string(b[len(header):nl]), " ")
	if len(f) != 3 || !strings.HasPrefix(f[0], "t=") || !strings.HasPrefix(f[1], "r=") || !strings.HasPrefix(f[2], "k=") {
		return bad("malformed header")
	}
	tok, err := fence.Parse(f[0][2:])
	if err != nil {
		return bad("malformed token: " + err.Error())
	}
	run := f[1][2:]
	if err := fence.ValidateRun(run); err != nil {
		return bad("malformed run: " + err.Error())
	}
	var k kind
	switch f[2] {
	case "k=v":
		k = kindValue
	case "k=d":
		k = kindDeleted
		if nl+1 != len(b) {
			return bad("tombstone with content")
		}
	default:
		return bad("malformed kind")
	}
	return mark{info: Info{Token: tok, Run: run}, kind: k}, b[nl+1:], nil
}

// readMark reads the header of resource's file (kindNone when it has
// none).
//
//nolint:gosec // G304/G703: every path here is below Dir, built from a resource checkResource validated (no "..", not absolute)
func (g *Guard) readMark(resource string) (mark, error) {
	f, err := os.Open(g.Path(resource))
	if errors.Is(err, fs.ErrNotExist) {
		return mark{}, nil
	}
	if err != nil {
		return mark{}, fmt.Errorf("fileguard: read %q: %w", resource, err)
	}
	defer func() { _ = f.Close() }()
	line, err := bufio.NewReaderSize(f, maxHeader).ReadSlice('\n')
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return mark{}, fmt.Errorf("fileguard: read %q: %w", resource, err)
	}
	m, _, perr := g.parse(resource, line)
	if perr == nil && m.kind == kindDeleted {
		// A tombstone is only its header: check there is nothing after it.
		if fi, err := f.Stat(); err == nil && fi.Size() != int64(len(line)) {
			return mark{}, &FileError{Resource: resource, Path: g.Path(resource), Reason: "tombstone with content"}
		}
	}
	return m, perr
}

// args checks a call's input before any I/O: resource, claim, the claim's
// scope when strict, and a ctx that has not ended.
func (g *Guard) args(ctx context.Context, resource string, c fence.Claim) error {
	err := g.checkArgs(ctx, resource, c)
	g.rec.Refused(ctx, resource, c, err)
	return err
}

func (g *Guard) checkArgs(ctx context.Context, resource string, c fence.Claim) error {
	if err := checkResource(resource); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if g.strict {
		if err := fence.CheckScope(resource, c); err != nil {
			return err
		}
	}
	if err := fence.ContextError(ctx); err != nil {
		return fmt.Errorf("fileguard: %q: %w", resource, err)
	}
	return nil
}

// ctxClaim returns the claim ctx carries, checked like args.
func (g *Guard) ctxClaim(ctx context.Context, resource string) (fence.Claim, error) {
	if err := checkResource(resource); err != nil {
		return fence.Claim{}, err
	}
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return fence.Claim{}, fmt.Errorf("fileguard: %q: %w", resource, err)
	}
	return c, g.args(ctx, resource, c)
}

// at runs the test hook of a step.
func (g *Guard) at(name string) error {
	if g.step != nil {
		return g.step(name)
	}
	return nil
}

// write is the fenced write; content returns what to write once the claim
// is admitted (Fence runs the caller's callback there).
func (g *Guard) write(ctx context.Context, resource string, c fence.Claim,
	content func(ctx context.Context) (kind, []byte, error)) error {
	ctx, span := g.rec.Start(ctx, resource, c)
	err := g.writeLocked(ctx, resource, c, content)
	g.rec.Decision(ctx, err)
	span.End(err)
	return err
}

//nolint:gosec // G304/G703: every path here is below Dir, built from a resource checkResource validated (no "..", not absolute)
func (g *Guard) writeLocked(ctx context.Context, resource string, c fence.Claim,
	content func(ctx context.Context) (kind, []byte, error)) error {
	unlock, err := g.lock(ctx, resource)
	if err != nil {
		return err
	}
	defer unlock()
	if err := g.at("locked"); err != nil {
		return err
	}
	m, err := g.readMark(resource)
	if err != nil {
		return err
	}
	if err := fence.DecideClaim(resource, c, m.info.Token, m.info.Run); err != nil {
		return err
	}
	k, value, err := content(ctx)
	if err != nil {
		return fence.WrapContext(ctx, err)
	}
	if err := fence.ContextError(ctx); err != nil {
		return fmt.Errorf("fileguard: %q: %w", resource, err)
	}
	if k == kindNone { // a Fence callback that staged nothing: the mark alone
		k, value = m.kind, nil
		if m.kind != kindDeleted {
			k = kindValue
			if body, _, err := g.Get(ctx, resource); err == nil {
				value = body
			}
		}
	}
	tok, run := fence.NextMark(c, m.info.Token, m.info.Run)
	tmp := g.tempPath(resource)
	if err := g.writeTemp(tmp, append(encodeHeader(fence.Claim{Token: tok, Run: run}, k), value...)); err != nil {
		return fmt.Errorf("fileguard: write %q: %w", resource, err)
	}
	if err := g.at("synced"); err != nil {
		return err
	}
	dst := g.Path(resource)
	err = os.Rename(tmp, dst)
	if errors.Is(err, fs.ErrNotExist) { // the resource's directory is missing
		if err = g.mkdirs(filepath.Dir(dst)); err == nil {
			err = os.Rename(tmp, dst)
		}
	}
	if err != nil {
		return fmt.Errorf("fileguard: write %q: %w", resource, err)
	}
	if err := g.at("renamed"); err != nil {
		return outcomeUnknown(ctx, resource, err)
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return outcomeUnknown(ctx, resource, err)
	}
	return g.at("done")
}

// writeTemp writes b to path (truncating what a crashed writer left) and
// syncs it.
//
//nolint:gosec // G304/G703: every path here is below Dir, built from a resource checkResource validated (no "..", not absolute)
func (g *Guard) writeTemp(path string, b []byte) error {
	f, err := g.create(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	half := len(b) / 2
	_, err = f.Write(b[:half])
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

//nolint:gosec // G304/G703: every path here is below Dir, built from a resource checkResource validated (no "..", not absolute)
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// create opens (creating) a file of the state directory, creating its
// directories first when they are missing: they exist on every write but
// a resource's first, which saves the MkdirAll on the others. The state
// directory's entries need no sync: a lost lock or temporary file is
// created again by the next write.
//
//nolint:gosec // G304/G703: every path here is below Dir, built from a resource checkResource validated (no "..", not absolute)
func (g *Guard) create(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag, g.perm)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), g.dirPerm); err != nil {
			return nil, err
		}
		f, err = os.OpenFile(path, flag, g.perm)
	}
	return f, err
}

// mkdirs creates dir, a resource's directory below Dir, and its missing
// parents, and syncs the parent of each one created: the write's own
// directory sync makes the file's entry durable, these make the path to
// it durable, so a machine crash after the write returned cannot lose a
// directory created for it.
//
//nolint:gosec // G304/G703: every path here is below Dir, built from a resource checkResource validated (no "..", not absolute)
func (g *Guard) mkdirs(dir string) error {
	var missing []string
	base := filepath.Clean(g.dir) // dir is below it: Path joins (and cleans) Dir and the resource
	for d := dir; len(d) > len(base); d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		// Another writer may create it meanwhile (EEXIST): its parent is
		// synced below all the same, as this write needs it durable too.
		if err := os.Mkdir(missing[i], g.dirPerm); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := syncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// lock takes resource's lock file (flock, exclusive), waiting until ctx
// ends or LockTimeout passes.
//
//nolint:gosec // G304/G703: every path here is below Dir, built from a resource checkResource validated (no "..", not absolute)
func (g *Guard) lock(ctx context.Context, resource string) (func(), error) {
	f, err := g.create(g.lockPath(resource), os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, fmt.Errorf("fileguard: lock %q: %w", resource, err)
	}
	var deadline time.Time
	if g.lockTimeout > 0 {
		deadline = time.Now().Add(g.lockTimeout)
	}
	wait := 50 * time.Microsecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) //nolint:gosec // a file descriptor fits an int
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
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
