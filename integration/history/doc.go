// Package history records what the executions of a fencekit chaos run did and
// checks the record for safety violations.
//
// # Model
//
// A run is a set of executions (goroutines or OS processes) competing for a
// few lease keys (sessions) and writing, while they believe they hold a
// lease, to shared resources through guards. Every step an execution takes is
// an [Event]: an acquisition granted, refused or failed; a renewal accepted,
// rejected or failed; the loss of a lease (its context ended) with a cause;
// a release; the invocation and completion of a guarded write with its
// resource, token and outcome; a work step ("this execution is still doing
// work under its lease"); and at the end the final state of every resource
// as read back from its store.
//
// Every event carries a sequence number assigned by the [Recorder] and two
// clocks: the wall clock for humans and the system-wide CLOCK_MONOTONIC
// reading ([Now]) for ordering. CLOCK_MONOTONIC is shared by every process on
// one machine, so events recorded by child processes can be merged with the
// parent's and still be ordered in real time.
//
// # What Check reports
//
//   - [OverlappingOwnership]: two executions believed they owned the same key
//     at the same instant. An execution's belief interval runs from the moment
//     its grant reply arrived to the earliest of its trust deadline (extended
//     only by renewals whose reply arrived before the deadline in force, and
//     by the deadlines work steps report, which reveal renewals the lease
//     made on its own), the
//     observed loss of its lease context, and the moment it sent its release.
//     A renewal accepted for a grant that a later grant of the same key had
//     already superseded is reported under the same kind.
//   - [StaleAccepted]: a write accepted with a token lower than the token of
//     a write accepted on the same resource whose completion preceded this
//     write's invocation (the same check as the conformance kit's,
//     guardtest.FindStaleAcceptances).
//   - [FinalState]: a resource whose final state was not written by the
//     highest accepted token (a write whose reply was lost may account for a
//     higher one).
//   - [TokenOrder]: per key, a grant that did not carry a larger token than
//     every grant whose reply arrived before its request was sent, or two
//     grants of one key with the same token.
//   - [WorkAfterLoss]: a work step taken after the execution observed that its
//     lease context had ended, after it sent its release, inside another
//     execution's belief interval for the same key, or more than
//     Options.WorkSlack after the trust deadline in force.
//
// Each [Violation] lists the events that prove it.
//
// # What is not checked
//
// Check judges only what was recorded. A write whose reply was lost
// ([Unknown]) is not counted as accepted, so a stale write that was accepted
// but never acknowledged is caught only through the final state. The
// ownership check relies on the executions recording honest times: a grant's
// Mono is taken after the reply arrived, a work step's Mono before the
// execution checked its context.
package history
