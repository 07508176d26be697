package lease

import "testing"

// pending returns the signal waiting on s, or 0.
func pending(s *subscription) signal {
	select {
	case sig := <-s.ch:
		return sig
	default:
		return 0
	}
}

// TestFanoutDispatch: a release wakes one waiter of the key and every
// watcher; a takeover wakes every watcher and no waiter; other keys hear
// nothing; signals coalesce; a waiter leaving with an unconsumed wakeup
// passes it on; a (re)connect pokes everyone.
func TestFanoutDispatch(t *testing.T) {
	f := newFanout()
	k, other := Key{AccountID: "a", SessionID: "s"}, Key{AccountID: "a", SessionID: "t"}
	w1, _ := f.subscribe(k, true)
	w2, _ := f.subscribe(k, true)
	watch, _ := f.subscribe(k, false)
	far, _ := f.subscribe(other, false)

	f.dispatch(keyPayload(k), true)
	f.dispatch(keyPayload(k), true) // coalesces for the watcher; may wake the second waiter
	if got := pending(watch); got != signalNotify {
		t.Fatalf("watcher after releases: %v", got)
	}
	if got := pending(watch); got != 0 {
		t.Fatalf("signals did not coalesce: %v", got)
	}
	if a, b := pending(w1), pending(w2); a != signalNotify && b != signalNotify {
		t.Fatalf("no waiter woken by a release: %v %v", a, b)
	}
	if got := pending(far); got != 0 {
		t.Fatalf("another key's subscriber woken: %v", got)
	}

	f.dispatch(keyPayload(k), false) // a takeover: the key is still held
	if a, b := pending(w1), pending(w2); a != 0 || b != 0 {
		t.Fatalf("a takeover woke a waiter: %v %v", a, b)
	}
	if got := pending(watch); got != signalNotify {
		t.Fatalf("watcher after a takeover: %v", got)
	}

	// One release wakes exactly one of the two waiters; the woken one
	// leaves without consuming it and passes it on to the other.
	f.dispatch(keyPayload(k), true)
	woken, rest := w1, w2
	if len(w2.ch) == 1 {
		woken, rest = w2, w1
	}
	if len(woken.ch) != 1 || len(rest.ch) != 0 {
		t.Fatalf("one release woke %d and %d waiters", len(w1.ch), len(w2.ch))
	}
	f.unsubscribe(woken, false)
	if got := pending(rest); got != signalNotify {
		t.Fatalf("the wakeup was not passed on: %v", got)
	}
	_ = pending(watch)

	f.setReady(true)
	for _, s := range []*subscription{rest, watch, far} {
		if got := pending(s); got != signalReconnect {
			t.Fatalf("connect did not poke %p: %v", s, got)
		}
	}
	f.unsubscribe(rest, false)
	f.unsubscribe(watch, false)
	f.unsubscribe(far, false)
	if len(f.subs) != 0 {
		t.Fatalf("subscriptions left: %d", len(f.subs))
	}
}
