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
// temporary files (tmp/<resource>). A resource is a relative path: '/'
// separated segments, none empty, "." or "..", none longer than 255 bytes,
// the first not ".fencekit" (*ResourceError otherwise).
//
// # Writing
//
// Put, PutClaim, Delete, DeleteClaim, and Fence / Do (whose callback stages
// the new content with Stage), each:
//
//  1. take the resource's lock file with flock (exclusive), waiting until
//     ctx ends or Config.LockTimeout passes (then fence.ErrBusy);
//  2. read the mark from the file's header and apply fence.DecideClaim;
//  3. write header and content to the temporary file and fsync it;
//  4. rename it over the resource's file, then fsync the directory (a
//     write that creates the resource's missing directories fsyncs the
//     parent of each one it creates);
//  5. release the lock.
//
// The rename is the commit point. A writer that dies at any step (tested
// with SIGKILL at each) leaves the old file or the new one, whole, with the
// mark that wrote it; the kernel releases its lock, and the next writer
// overwrites its temporary file.
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
//   - A file the guard did not write (*FileError) is neither read through
//     nor overwritten. Bad input returns a typed error before any I/O.
//   - Once ctx has ended, calls return an error matching ctx.Err() and
//     context.Cause(ctx), never fence.ErrBusy.
//
// # What is not guaranteed
//
//   - One host only. flock locks are per host; on NFS and other network
//     file systems they are emulated or absent, and rename and fsync
//     semantics differ: do not use fileguard there. Several processes on
//     one host are fine.
//   - Writers that bypass the guard (editing, replacing or deleting the
//     file) are not fenced; a deleted file has lost its mark and admits
//     every token.
//   - Durability is what fsync gives on the file system and disk: file
//     systems or disks that ignore flushes can lose an acknowledged write.
//   - Effects of a Fence callback outside the file are not fenced; a
//     callback that staged nothing raises the mark and keeps the content.
//   - Unix only (flock, rename over an existing file).
package fileguard
