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
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// StateDir is the directory inside Config.Dir that holds the lock files
// and the temporary files; no resource may start with it.
const StateDir = ".fencekit"

// guardName prefixes the guard's errors and names it to the engine.
const guardName = "fileguard"

// DefaultLockTimeout is Config.LockTimeout's default, the same in every
// guard that has the field.
const DefaultLockTimeout = 5 * time.Second

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
	// Default 0o644.
	Perm fs.FileMode
	// DirPerm is the permission of the directories the guard creates (a
	// resource's directories and those of its state directory), before the
	// umask. It must give the owner rwx. Default: rwx for the owner, and
	// r-x for the group and for others when Perm lets them read: 0o755
	// for Perm 0o644 or 0o666, 0o750 for 0o640, 0o700 for 0o600. Write
	// permission on a directory lets its holder replace or remove the
	// files in it, bypassing the guard: grant it (0o770, say) only when
	// writers running as several users of one group share Dir.
	DirPerm fs.FileMode
	// LockPerm is the permission of the lock files the guard creates,
	// before the umask. Default 0o600. Whoever can open a lock file can
	// hold its flock and stall every writer of the resource (with
	// LockTimeout zero, until each writer's ctx ends): give access only to
	// the users that run writers (0o660 for a shared group). It must give
	// the owner read and write. A lock file found with more permission
	// bits than LockPerm is narrowed to LockPerm when the guard may change
	// it.
	LockPerm fs.FileMode
	// LockTimeout bounds how long a write waits for the resource's lock
	// held by another writer; then it fails with an error matching
	// fence.ErrBusy. Zero means DefaultLockTimeout, as in every guard with
	// the field; negative sets no bound of the guard's own (the wait ends
	// with ctx).
	LockTimeout time.Duration
	// MeterProvider records the guard instruments of package guardobs with
	// guard="file". Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one span ("fencekit.guard.write", a child of the
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
	lockPerm    fs.FileMode
	lockTimeout time.Duration // 0: none (wait until ctx ends)
	eng         *engine.Engine

	step func(name string) error // tests: runs at each step of a write
}

var _ fence.Guard = (*Guard)(nil)

// New validates cfg and returns a Guard. It checks that Dir is a
// directory; it writes nothing.
func New(cfg Config) (*Guard, error) {
	if cfg.Dir == "" {
		return nil, configErr("Dir", "empty", nil)
	}
	fi, err := os.Stat(cfg.Dir)
	if err != nil {
		return nil, configErr("Dir", err.Error(), err)
	}
	if !fi.IsDir() {
		return nil, configErr("Dir", fmt.Sprintf("%s is not a directory", cfg.Dir), nil)
	}
	if cfg.Perm == 0 {
		cfg.Perm = 0o644
	}
	if cfg.Perm&^fs.ModePerm != 0 {
		return nil, configErr("Perm", fmt.Sprintf("%v has bits beyond the permission bits", cfg.Perm), nil)
	}
	if cfg.DirPerm == 0 {
		cfg.DirPerm = 0o700 | cfg.Perm&0o044 | (cfg.Perm&0o044)>>2
	}
	if cfg.DirPerm&^fs.ModePerm != 0 || cfg.DirPerm&0o700 != 0o700 {
		return nil, configErr("DirPerm", fmt.Sprintf("%v must be permission bits only, with rwx for the owner", cfg.DirPerm), nil)
	}
	if cfg.LockPerm == 0 {
		cfg.LockPerm = 0o600
	}
	if cfg.LockPerm&^fs.ModePerm != 0 || cfg.LockPerm&0o600 != 0o600 {
		return nil, configErr("LockPerm", fmt.Sprintf("%v must be permission bits only, with rw for the owner", cfg.LockPerm), nil)
	}
	switch {
	case cfg.LockTimeout == 0:
		cfg.LockTimeout = DefaultLockTimeout
	case cfg.LockTimeout < 0:
		cfg.LockTimeout = 0 // no bound of the guard's own
	}
	rec, err := guardobs.New(guardobs.Config{Kind: "file", Name: guardName,
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	g := &Guard{dir: cfg.Dir, perm: cfg.Perm, dirPerm: cfg.DirPerm, lockPerm: cfg.LockPerm, lockTimeout: cfg.LockTimeout,
		eng: &engine.Engine{Args: engine.Args{Name: guardName, Strict: cfg.Strict, Rec: rec, Resource: checkResource},
			Op: "fileguard: write"}}
	g.eng.Driver = (*driver)(g)
	return g, nil
}

// Dir returns the guard's directory.
func (g *Guard) Dir() string { return g.dir }

// Path returns the file that holds resource's content (with its header).
// The guard itself never opens it by this name: see the package
// documentation on symbolic links.
func (g *Guard) Path(resource string) string {
	return filepath.Join(g.dir, filepath.FromSlash(resource))
}

// ValidateResource reports whether the guard accepts resource as a name,
// with the *fence.ResourceError its writes would return otherwise: for
// callers that check every name an id becomes before acting on it (an
// MCP server's mcpfence.Config.CheckKey, say).
func ValidateResource(resource string) error { return checkResource(resource) }

// checkResource applies fence.ValidateResource and the rules of a path
// below Dir: segments separated by '/', none empty, ".", ".." or longer
// than 255 bytes, and the first not StateDir (a *fence.ResourceError
// otherwise).
func checkResource(resource string) error {
	if err := fence.ValidateResource(resource); err != nil {
		return err
	}
	for i, seg := range strings.Split(resource, "/") {
		switch {
		case seg == "":
			return &fence.ResourceError{Resource: resource, Reason: "empty path segment (leading, trailing or double '/')"}
		case seg == "." || seg == "..":
			return &fence.ResourceError{Resource: resource, Reason: fmt.Sprintf("path segment %q", seg)}
		case len(seg) > maxSegment:
			return &fence.ResourceError{Resource: resource, Reason: fmt.Sprintf("path segment of %d bytes, limit %d", len(seg), maxSegment)}
		case i == 0 && seg == StateDir:
			return &fence.ResourceError{Resource: resource, Reason: "starts with the guard's state directory " + StateDir}
		}
	}
	return nil
}

// Put writes value as resource's content under the claim ctx carries
// (fence.ClaimFromContext; none: fence.ErrNoToken, nothing written; a
// claim from elsewhere goes in with fence.WithClaim): under resource's
// lock, it reads the mark from the file's header, applies
// fence.DecideClaim, writes the header and value to a temporary file, syncs
// it, renames it over the resource's file and syncs the directory.
func (g *Guard) Put(ctx context.Context, resource string, value []byte) error {
	return g.eng.Put(ctx, resource, value)
}

// Delete replaces resource's content with a tombstone under the claim ctx
// carries: the mark stays, so older tokens are still refused.
func (g *Guard) Delete(ctx context.Context, resource string) error {
	return g.eng.Delete(ctx, resource)
}

// Get returns resource's content and mark. A resource without a file (also
// one whose path is a directory holding other resources, as a's is when
// a/b was written; a itself cannot be written then), or with a tombstone,
// yields a *fence.NotFoundError (fence.ErrNotFound).
// A symbolic link or a special file on the way yields an *UnsafePathError.
// Reads take no lock: a rename replaces a file whole, so a reader sees the
// old or the new one.
func (g *Guard) Get(ctx context.Context, resource string) ([]byte, Info, error) {
	if err := g.eng.Read(ctx, resource); err != nil {
		return nil, Info{}, err
	}
	f, err := g.openResource(resource)
	if err != nil {
		return nil, Info{}, err
	}
	if f == nil {
		return nil, Info{}, &fence.NotFoundError{Source: "fileguard", Resource: resource}
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, Info{}, fmt.Errorf("fileguard: read %q: %w", resource, err)
	}
	m, body, err := g.parse(resource, b)
	if err != nil {
		return nil, Info{}, err
	}
	if m.kind == kindDeleted {
		return nil, m.info, &fence.NotFoundError{Source: "fileguard", Resource: resource, Deleted: true, Token: m.info.Token}
	}
	return body, m.info, nil
}

// Mark returns resource's mark: the claim of its last admitted write, or
// the zero Claim when it has no file (or a directory at its path).
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if err := g.eng.Read(ctx, resource); err != nil {
		return fence.Claim{}, err
	}
	f, err := g.openResource(resource)
	if err != nil || f == nil {
		return fence.Claim{}, err
	}
	defer func() { _ = f.Close() }()
	m, err := g.readHeader(resource, f)
	return fence.Claim{Token: m.info.Token, Run: m.info.Run}, err
}

// openResource opens resource's file for reading, or returns nil and no
// error when it has none (missing, a directory, or below a regular file).
func (g *Guard) openResource(resource string) (*os.File, error) {
	root, err := g.openRoot()
	if err != nil {
		return nil, fmt.Errorf("fileguard: read %q: %w", resource, err)
	}
	defer root.close()
	dirs, name := split(resource)
	d, err := g.walk(resource, root, dirs, false, false)
	if err == nil {
		defer d.closeUnless(root)
		var f *os.File
		if f, _, err = g.openFile(resource, d, name, unix.O_RDONLY, 0); err == nil {
			return f, nil
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR):
		return nil, nil
	case errors.Is(err, ErrUnsafePath):
		return nil, err
	}
	return nil, fmt.Errorf("fileguard: read %q: %w", resource, err)
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
		return mark{}, nil, &fence.ForeignError{Source: "fileguard", Resource: resource, Key: g.Path(resource), Reason: reason}
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

// readHeader reads the header of resource's file f.
func (g *Guard) readHeader(resource string, f *os.File) (mark, error) {
	line, err := bufio.NewReaderSize(f, maxHeader).ReadSlice('\n')
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return mark{}, fmt.Errorf("fileguard: read %q: %w", resource, err)
	}
	m, _, perr := g.parse(resource, line)
	if perr == nil && m.kind == kindDeleted {
		// A tombstone is only its header: check there is nothing after it.
		if fi, err := f.Stat(); err == nil && fi.Size() != int64(len(line)) {
			return mark{}, &fence.ForeignError{Source: "fileguard", Resource: resource, Key: g.Path(resource), Reason: "tombstone with content"}
		}
	}
	return m, perr
}

// body returns the content of resource's file f, whose header was read as
// m when the write took the lock. A read error, or a file changed in place
// since (by something other than this guard), fails the write: a mark-only
// write must carry the content over, never write an empty one instead.
func (g *Guard) body(resource string, f *os.File, m mark) ([]byte, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, math.MaxInt64))
	if err != nil {
		return nil, fmt.Errorf("fileguard: read %q: %w", resource, err)
	}
	now, body, err := g.parse(resource, b)
	if err != nil {
		return nil, err
	}
	if now != m {
		return nil, &fence.ForeignError{Source: "fileguard", Resource: resource, Key: g.Path(resource),
			Reason: "changed by another program while this write held its lock"}
	}
	return body, nil
}

// at runs the test hook of a step.
func (g *Guard) at(name string) error {
	if g.step != nil {
		return g.step(name)
	}
	return nil
}
