// Package objstage is the write path that the object-store guards
// (guards/s3guard, guards/gcsguard) share: the stager a Fence callback
// stages its one change through, the run of a fenced write from the
// argument checks to the commit, and the content helpers both use (write
// ids, declared-size checks).
//
// It decides nothing on its own: the guard supplies the read-and-decide
// step and the conditional commit. Argument and claim checks are
// engine.Args' (guards/internal/engine), so its errors are the shared
// vocabulary: a nil context or nil callback matches fence.ErrNilArgument,
// staging misuse is fence.ErrNoStager, fence.ErrAlreadyStaged or
// fence.ErrStageClosed. What it guarantees to a guard: a callback stages
// at most one change, and nothing after its Fence call returned; the
// callback runs only after the resource, the claim and (with Strict) the
// scope were checked and the decision admitted the claim; a failed
// callback commits nothing; a refusal of the arguments is recorded as a
// span marked not sent, every outcome past them is recorded once in the
// guard's guardobs.Recorder and, once ctx has ended, matches ctx's error
// (see ContextErr).
//
// It is internal to fencekit: the guards' own packages document the
// behaviour users rely on.
package objstage
