//go:build unix

package fileguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Every path below Dir is opened one component at a time, relative to the
// file descriptor of the directory before it, with O_NOFOLLOW: a symbolic
// link anywhere below Dir (a resource's file, one of its directories, the
// state directory, a lock or temporary file) is refused, whenever it was
// created, because nothing is ever resolved by name from Dir down. Files
// are opened with O_NONBLOCK and checked with fstat before anything is read
// or written, so a FIFO (whose open would block until a writer appears), a
// socket or a device is refused without waiting. Dir itself is opened by
// name: it is configuration, and may be a symbolic link.
//
// os.Root (Go 1.24) also keeps opens below a directory, but it follows
// symbolic links that stay inside it, which this guard refuses, and it
// reports an escape with an unexported error; openat2's RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS does the walk in one system call but exists on Linux
// 5.6+ only. The walk below is one code path on every Unix; its cost, one
// openat per path component, is small beside the two fsyncs of a write.

// dirFlags opens a directory of the walk: never through a symbolic link,
// never blocking on something that is not a directory.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

// fileFlags is added to every file open below Dir.
const fileFlags = unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

// dir is an open directory below (or at) Dir.
type dir struct {
	fd   int
	path string // for messages
}

func (d dir) close() {
	if d.fd >= 0 {
		_ = unix.Close(d.fd)
	}
}

// ignoringEINTR retries f while it fails with EINTR, as package os does.
func ignoringEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// openRoot opens Dir.
func (g *Guard) openRoot() (dir, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(g.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return dir{fd: -1}, &fs.PathError{Op: "open", Path: g.dir, Err: err}
	}
	return dir{fd: fd, path: g.dir}, nil
}

// openDir opens the directory name in d. A missing one is created when
// create is set (with DirPerm; when durable, d is then synced so that the
// new entry survives a machine crash). The error matches fs.ErrNotExist
// when it is missing and not created, and is an *UnsafePathError when it is
// a symbolic link or a special file, an *fs.PathError matching
// unix.ENOTDIR when it is a regular file.
func (g *Guard) openDir(resource string, d dir, name string, create, durable bool) (dir, error) {
	p := filepath.Join(d.path, name)
	var fd int
	open := func() error {
		return ignoringEINTR(func() (err error) {
			fd, err = unix.Openat(d.fd, name, dirFlags, 0)
			return err
		})
	}
	err := open()
	if errors.Is(err, unix.ENOENT) && create {
		err = ignoringEINTR(func() error { return unix.Mkdirat(d.fd, name, uint32(g.dirPerm)) })
		if err == nil || errors.Is(err, unix.EEXIST) {
			// Another writer may have created it meanwhile: the entry must
			// be durable for this write all the same.
			if durable {
				if err := ignoringEINTR(func() error { return unix.Fsync(d.fd) }); err != nil {
					return dir{fd: -1}, &fs.PathError{Op: "fsync", Path: d.path, Err: err}
				}
			}
			err = open()
		}
	}
	if err != nil {
		return dir{fd: -1}, g.classify(resource, d, name, "openat", err)
	}
	return dir{fd: fd, path: p}, nil
}

// walk opens the directories segs below d, in order, and returns the last
// (d itself, not a new descriptor, when segs is empty: the caller must not
// close it twice; see owned).
func (g *Guard) walk(resource string, d dir, segs []string, create, durable bool) (dir, error) {
	cur := d
	for _, s := range segs {
		next, err := g.openDir(resource, cur, s, create, durable)
		if cur.fd != d.fd {
			cur.close()
		}
		if err != nil {
			return dir{fd: -1}, err
		}
		cur = next
	}
	return cur, nil
}

// openFile opens the file name in d with flag (plus O_NOFOLLOW, O_NONBLOCK
// and O_CLOEXEC), checks that it is a regular file and returns it with its
// status. A directory yields an *fs.PathError matching unix.EISDIR (the
// descriptor closed), a symbolic link or any other kind of file an
// *UnsafePathError.
func (g *Guard) openFile(resource string, d dir, name string, flag int, perm fs.FileMode) (*os.File, unix.Stat_t, error) {
	p := filepath.Join(d.path, name)
	var fd int
	var st unix.Stat_t
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(d.fd, name, flag|fileFlags, uint32(perm))
		return err
	})
	if err != nil {
		return nil, st, g.classify(resource, d, name, "openat", err)
	}
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		_ = unix.Close(fd)
		return nil, st, &fs.PathError{Op: "fstat", Path: p, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return os.NewFile(uintptr(fd), p), st, nil //nolint:gosec // a file descriptor is not negative
	case unix.S_IFDIR:
		_ = unix.Close(fd)
		return nil, st, &fs.PathError{Op: "open", Path: p, Err: unix.EISDIR}
	default:
		_ = unix.Close(fd)
		return nil, st, &UnsafePathError{Resource: resource, Path: p, Reason: kindName(&st)}
	}
}

// classify turns the error of an open of name in d into an *UnsafePathError
// when name is a symbolic link or a special file (the errno of an
// O_NOFOLLOW open of a link differs between systems: ELOOP, EMLINK,
// ENOTDIR with O_DIRECTORY), and into an *fs.PathError otherwise.
func (g *Guard) classify(resource string, d dir, name, op string, err error) error {
	p := filepath.Join(d.path, name)
	if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if serr := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG, unix.S_IFDIR:
			default:
				return &UnsafePathError{Resource: resource, Path: p, Reason: kindName(&st)}
			}
		}
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// kindName names the type of the file st describes, for messages.
func kindName(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	default:
		return fmt.Sprintf("not a regular file (mode %#o)", st.Mode)
	}
}

// split returns the directories of a resource (checked by checkResource)
// and its file name.
func split(resource string) ([]string, string) {
	d, f := path.Split(resource)
	if d == "" {
		return nil, f
	}
	return strings.Split(strings.TrimSuffix(d, "/"), "/"), f
}

// closeUnless closes d unless it is other (walk returns its start when it
// has no directory to open).
func (d dir) closeUnless(other dir) {
	if d.fd != other.fd {
		d.close()
	}
}
