package mcpfence

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/lease"
)

// TestCachedRunInvalidatedBy: the watch events that drop a cached run, and
// their causes; the run's own renewals, parks and resumes keep it.
func TestCachedRunInvalidatedBy(t *testing.T) {
	run, other := uuid.New(), uuid.New()
	e := &cachedRun{key: lease.Key{AccountID: "a", SessionID: "c"}, id: run}
	ev := func(kind lease.WatchKind, id uuid.UUID, state lease.State) lease.WatchEvent {
		return lease.WatchEvent{Kind: kind, Ownership: lease.Ownership{RunID: id, State: state}}
	}
	for _, c := range []struct {
		name string
		ev   lease.WatchEvent
		want error // nil: kept
	}{
		{"current, held by the run", ev(lease.WatchCurrent, run, lease.StateHeld), nil},
		{"renewed (parked, resumed)", ev(lease.WatchRenewed, run, lease.StateHeld), nil},
		{"current after falling behind, held by the run", lease.WatchEvent{Kind: lease.WatchCurrent, Dropped: true, Ownership: lease.Ownership{RunID: run, State: lease.StateHeld}}, nil},
		{"taken over", lease.WatchEvent{Kind: lease.WatchTakenOver, Displaced: run, Ownership: lease.Ownership{RunID: other, State: lease.StateHeld}}, lease.ErrTakenOver},
		{"released", ev(lease.WatchReleased, run, lease.StateReleased), lease.ErrReleased},
		{"current, released", ev(lease.WatchCurrent, run, lease.StateReleased), lease.ErrReleased},
		{"expired", ev(lease.WatchExpired, run, lease.StateExpired), lease.ErrLost},
		{"granted to another run", ev(lease.WatchGranted, other, lease.StateHeld), lease.ErrLost},
		{"current, another run", ev(lease.WatchCurrent, other, lease.StateHeld), lease.ErrLost},
		{"current, no row", ev(lease.WatchCurrent, uuid.Nil, lease.StateNotFound), lease.ErrLost},
	} {
		got := e.invalidatedBy(c.ev)
		switch {
		case c.want == nil && got != nil:
			t.Errorf("%s: dropped (%v), want kept", c.name, got)
		case c.want != nil && !errors.Is(got, c.want):
			t.Errorf("%s: %v, want a cause matching %v", c.name, got, c.want)
		case c.want != nil && !errors.Is(got, lease.ErrLost):
			t.Errorf("%s: %v does not match lease.ErrLost", c.name, got)
		}
	}
}
