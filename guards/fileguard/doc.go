//go:build unix

// Package fileguard fences writes to files on a local file system: a write
// presenting a fencing token below the highest one a file has accepted is
// refused, under the file's lock, before anything is written, and an
// admitted write replaces the file whole.
//
// # Layout
//
// Config.Dir holds the resources: resource "reports/q3.txt" is the file
// Dir/reports/q3.txt. Each file starts with a one-line header that is its
// mark, then the content:
//
//	fencekit-file/1 t=<token> r=<run> k=<v|d>\n<content>
//
// (k=d is a tombstone left by a fenced Delete: the mark stays, the content
// is gone). Get strips the header; other programs reading the file see it.
// Dir/.fencekit holds the guard's lock files (lock/<resource>) and
// temporary files (tmp/<random>.tmp). A resource is a relative path: '/'
// separated segments, none empty, "." or "..", none longer than 255 bytes,
// the first not ".fencekit" (*fence.ResourceError otherwise).
//
// # Paths below Dir
//
// The guard opens every path below Dir one component at a time, relative
// to the directory opened before it, with O_NOFOLLOW, and renames between
// directories it holds open: it never resolves a name from Dir down, so a
// symbolic link on the way (the resource's file, any of its directories,
// the state directory, a lock or temporary file), whenever it was created,
// is refused with an *UnsafePathError (ErrUnsafePath) and nothing is read
// or written through it. Files are opened with O_NONBLOCK and checked with
// fstat before use: a FIFO, socket or device is refused the same way at
// once, never waited on, and so is a lock file with a second hard link
// (the guard writes into lock files). Dir itself is opened by name and may
// be a link.
//
// Permissions: files get Config.Perm (default 0o644), directories the guard
// creates Config.DirPerm (default: the owner's rwx, plus r-x for each class
// Perm lets read, so never writable by others), lock files
// Config.LockPerm (default 0o600: whoever can open a lock file can hold it
// and stall every writer of its resource). All before the umask.
//
// Lock files stay after their write. A lock file can be removed safely only
// if every writer checks, after taking the lock, that the file it locked is
// still the one at the path; guards of earlier releases sharing Dir do not,
// and two writers would then hold "the" lock on different files. Each holds
// only the name of its resource's last temporary file (36 bytes), one per
// resource ever written: remove Dir/.fencekit/lock while no writer runs to
// reclaim them.
//
// # Writing
//
// Put, Delete, and Fence / Do (whose callback stages
// the new content with fence.Stage), each:
//
//  1. take the resource's lock file with flock (exclusive), waiting until
//     ctx ends or Config.LockTimeout (default 5s) passes (then
//     fence.ErrBusy);
//  2. read the mark from the file's header and apply fence.DecideClaim;
//  3. write header and content to a new temporary file, created with a
//     random name, O_EXCL and O_NOFOLLOW (its name recorded in the lock
//     file first), and fsync it;
//  4. rename it over the resource's file, then fsync the directory (a
//     write that creates the resource's missing directories fsyncs the
//     parent of each one it creates);
//  5. release the lock.
//
// The rename is the commit point. A writer that dies at any step (tested
// with SIGKILL at each) leaves the old file or the new one, whole, with the
// mark that wrote it; the kernel releases its lock, and the next writer of
// the resource removes the temporary file the lock file names.
//
// A Fence callback that staged nothing raises the mark and carries the
// content over (a resource without content gets a tombstone), read from the file whose mark was decided on; if that
// content cannot be read, or another program changed the file meanwhile,
// the write fails (a *fence.ForeignError for a changed file) and nothing is written.
//
// # What is guaranteed
//
//   - Among writers going through fileguard on one host, no write is
//     applied whose token is below an applied one, nor one whose token
//     equals the mark's while both carry different run identities
//     (*fence.ReusedError). Content and mark change together.
//   - A reader (Get) sees a whole file: the old one or the new one.
//   - If the directory cannot be synced after the rename, the error is a
//     *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown): the new file is
//     visible, but a machine crash may bring the old one back. There is no
//     reply to lose: a write is a local system call, so an ended context
//     never leaves a write in flight (the guardtest outcome check, which
//     holds a store's reply, does not apply).
//   - With Config.Strict, a write whose resource lies outside its claim's
//     scope, or whose claim has no scope, is refused with a
//     *fence.ScopeError before any I/O.
//   - A file the guard did not write (*fence.ForeignError) is neither read through
//     nor overwritten. Bad input returns a typed error before any I/O.
//   - Nothing outside Dir is created, read or written through a symbolic
//     link below Dir, and no open waits on a FIFO (*UnsafePathError,
//     above).
//   - Once ctx has ended, calls return an error matching ctx.Err() and
//     context.Cause(ctx), never fence.ErrBusy. A nil ctx is refused with
//     fence.ErrNilArgument before any I/O (fence.Stage: fence.ErrNoStager).
//   - A read of a resource without content (never written, tombstoned, or
//     a directory holding other resources) returns a *fence.NotFoundError, which
//     matches fence.ErrNotFound.
//   - No write is ever in transit outside its own call: a copy of a write
//     cannot reach the file later (the guardtest delayed-duplicate check,
//     which needs a copy in transit on a network, does not apply).
//
// # What is not guaranteed
//
//   - One host only. flock locks are per host; on NFS and other network
//     file systems they are emulated or absent, and rename and fsync
//     semantics differ: do not use fileguard there. Several processes on
//     one host are fine.
//   - Writers that bypass the guard (editing, replacing or deleting the
//     file) are not fenced; a deleted file has lost its mark and admits
//     every token. A user who can write to Dir or to a directory below it
//     can do that, and can move a directory while a write runs: the write
//     lands in the directory it opened, wherever that is now (they could
//     move the file as well). Grant write access to Dir only to writers.
//   - Modes of files and directories that already exist are not changed,
//     except that a lock file with more permission bits than LockPerm is
//     narrowed when this process may: directories made by earlier releases
//     from a Perm such as 0o666 (mode 0o777) keep their mode.
//   - Durability is what fsync gives on the file system and disk: file
//     systems or disks that ignore flushes can lose an acknowledged write.
//   - Effects of a Fence callback outside the file are not fenced; a
//     callback (its ctx carries the admitted claim) that staged nothing
//     raises the mark and keeps the content, or writes a tombstone over no
//     content (Get then reports fence.ErrNotFound).
//   - Unix only (flock, rename over an existing file).
package fileguard
