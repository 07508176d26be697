// Package objstage holds what the object-store guards (guards/s3guard,
// guards/gcsguard) share beyond the engine (guards/internal/engine), which
// runs their fenced writes: the staging of a reader as a Fence callback's
// change (StageContent: the guard's option check, a size of -1 or more, a
// reader that is not nil, then the guard's own build under the engine's
// Stager), the checks of content against a declared size (SizedReader,
// SeekLen, ReadSized; a mismatch is a *fence.SizeError) and write ids as
// the guards store them (IsWriteID).
//
// It is internal to fencekit: the guards' own packages document the
// behaviour users rely on.
package objstage
