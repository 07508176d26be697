// Package memguard is an in-process fence.Guard: it fences resources that
// live inside one process (an in-memory cache, a local file written by one
// process, a test double of a real store).
//
// A Guard keeps, per resource name, a high-water mark and a lock. Fence
// takes the resource's lock, applies fence.Decide to the mark, runs write
// while still holding the lock, and raises the mark to the token only if
// write returned nil. Waiting for the lock is bounded by ctx.
//
// # What is guaranteed
//
//   - Admission, write and mark update of one resource are serialised: no
//     write with a lower token is admitted once a higher one has been
//     accepted, and two admitted writes never run at the same time on one
//     resource. Different resources do not block each other.
//   - A refused call (stale token, invalid token or resource name, ctx done
//     before the lock was taken) does not call write and changes nothing.
//   - A write that fails or panics leaves the mark unchanged and releases the
//     lock (a panic propagates to the caller).
//   - A ctx that ends while Fence waits for the lock yields an error matching
//     both fence.ErrBusy and ctx.Err(), and write is not called.
//
// # Metrics
//
// Config.MeterProvider (OpenTelemetry; nil records nothing) receives
// fencekit.guard.accepted (writes that succeeded under an admitted token),
// fencekit.guard.stale and fencekit.guard.token_gap, attribute
// guard="memory" only — never the resource name. See docs/operations.md.
//
// # What is not guaranteed
//
//   - Marks live in memory only: they are lost when the process exits and
//     are not shared with other processes. Use guards/pgguard (or another
//     persistent guard) when more than one process writes.
//   - The guard does not undo what a failed write did. If write changes
//     state and then returns an error, that change stays; only the mark is
//     not raised.
//   - Resource entries are kept for the Guard's lifetime (one small entry
//     per distinct resource name); there is no eviction.
//   - The lock is not reentrant: calling Fence for the same resource from
//     inside its own write blocks until ctx ends.
package memguard
