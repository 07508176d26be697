// Package engine is the one implementation of a guard's fenced write that
// the guards of package guards share: argument and claim handling, the
// loop that reads a resource's mark, decides, runs a Fence callback,
// commits conditionally under a write id and settles a lost reply, the
// staging of a Fence callback's change, and the recording of every
// outcome (package guardobs).
//
// A guard supplies a [Driver]: how to read its store's mark ([Driver.Open]),
// how to send one conditional write ([Attempt.Commit]) and how to settle a
// write whose reply was lost ([Attempt.Settle]). The engine owns the rest,
// so every guard built on it behaves the same:
//
//   - nil context, nil callback: an error matching fence.ErrNilArgument,
//     before any I/O;
//   - a claim from the context (fence.ClaimFromContext) for the ctx-first
//     forms, fence.ClaimFor for the explicit-token Fence, the resource
//     checked by fence.ValidateResource and the guard's own rules, the
//     scope when strict, and a context that has not ended, all before any
//     I/O; a refusal is recorded as a span marked not sent;
//   - a Fence callback runs only after the claim was admitted on a read of
//     the mark (fresh for Fence; [Engine.Run] with [ReadAny] lets a driver
//     decide on a mark it remembers, a refusal on it being decided again
//     on a fresh read), under the call's span, with a context that carries
//     that claim (fence.ClaimFromContext) and the guard's [Stager]; what it
//     staged is committed by the same loop as a Put or Delete, which
//     decides again; a failing callback commits nothing;
//   - a callback that staged nothing commits [OpMark]: the mark is raised
//     and the value is kept; a resource without a value keeps none (a
//     later read reports fence.ErrNotFound);
//   - each conditional write carries a fresh write id; a lost reply is
//     settled by the driver; a write settled as not applied, or that lost
//     a race, is sent again while Config.MaxAttempts allows and the
//     context is live;
//   - every error passes through [ContextErr]: once the context has ended
//     it matches the context's error and cause, and never fence.ErrBusy. MaxAttempts counts the conditional writes of one
//     call, the first included, each under its own write id (a write sent
//     on a mark the driver remembers counts like any other); re-sends of
//     one write while settling it do not count. Its default is
//     [DefaultMaxAttempts] in every guard.
//
// A change is a value ([Change.Value]) or, for a driver that stages its
// own content, anything the driver understands ([Change.Content]): the
// object-store guards (s3guard, gcsguard) stage uploads and streamed
// bodies that the engine passes on untouched. A guard's staging call
// finds the call's Stager ([StagerOf]) and builds its change under the
// Stager's lock ([Stager.Stage]), knowing the call's driver, resource,
// claim and the write id of the first conditional write. The Stager is
// also the callback's stagectx.Stager (internal/stagectx), through which
// fence.Stage and fence.StageDelete stage into whichever guard's callback
// they are called in: fence.Stage's value is an OpPut of it, or the
// change [Engine.Bytes] builds (the object-store guards, whose change is
// their own content). A guard that does not stage hands its callbacks a
// context from [WithoutStager]. A driver that keeps state across the
// attempts of one call (what it committed, what was staged, a mark it
// read after losing a race) is made per call and run with [Engine.With].
//
// It is internal to the guards: its API may change with them.
package engine
