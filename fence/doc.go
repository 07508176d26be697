// Package fence defines fencing tokens and the guard contract shared by every
// fencekit store adapter.
//
// A fencing token is a positive 63-bit integer handed out with every lease
// acquisition (see package lease). Within one lease key, a later grant always
// carries a larger token. A downstream resource protected by a [Guard] keeps
// the highest token it has accepted (its high-water mark) and refuses writes
// that present a lower one, in the same atomic step as the write itself.
//
// # Decision rule
//
// For a resource whose mark is H and a write presenting token T:
//
//	T >  H  accept, raise the mark to T
//	T == H  accept (the same acquisition retrying or writing again)
//	T <  H  refuse with *StaleError{Presented: T, Highest: H}
//
// # What is guaranteed
//
//   - [Parse] accepts only canonical decimal text: ASCII digits, no sign, no
//     leading zero, no spaces, no more than 19 digits, value in 1..MaxInt64.
//     Every rejected input yields an error matching [ErrInvalidToken].
//   - [StaleError] matches [ErrStale] with errors.Is and carries both tokens.
//     It is distinct from [ErrBusy] (the resource could not decide now; retry)
//     and from infrastructure errors (anything else).
//   - A [Guard] implementation runs the caller's write only when the decision
//     rule admits the token, and raises the mark if and only if the write
//     succeeds, atomically with respect to every other Fence call on the same
//     resource. Package guards/guardtest checks these properties for any
//     implementation.
//
// # What is not guaranteed
//
//   - A token says nothing about whether its lease is still held. A guard only
//     orders writers; stopping work after a lost lease is the lease's job.
//   - Effects that write performs outside the store its guard protects are not
//     rolled back or fenced.
//   - Tokens from different lease keys (or different lease databases) are not
//     comparable. Use one token source per guarded resource.
package fence
