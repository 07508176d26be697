package lease

// event is one thing a Manager did that a test may wait for
// (export_test.go's Events). The Manager's metrics, spans and logs are
// recorded where each thing happens; events are only for tests: a
// production Manager has no hook and observe does nothing.
type event struct {
	kind   eventKind
	key    Key
	n      int        // evBatch: leases in the statement
	failed bool       // evBatch: the statement failed
	wake   wakeReason // evWoken
	up     bool       // evListener: connected (true) or lost (false)
}

type eventKind uint8

const (
	evHeld          eventKind = iota + 1 // an acquire refused: the key is held
	evAcquireFailed                      // an acquire failed, or was refused by the database
	evBatch                              // a renewal or heartbeat statement ran or failed
	evLost                               // a lease ended by loss
	evWaiting                            // an AcquireWait caller goes to sleep
	evWoken                              // an AcquireWait caller woke up
	evListener                           // the listener connected or lost its connection
)

// observe hands ev to the test hook, if any. It is called synchronously
// from the Manager's goroutines; the hook must not block.
func (m *Manager) observe(ev event) {
	if m.hook != nil {
		m.hook(ev)
	}
}

// wakeReason says why an AcquireWait waiter re-tried.
type wakeReason uint8

const (
	wakeNotify    wakeReason = iota + 1 // a release NOTIFY for the key
	wakeExpiry                          // the holder's known expiry passed
	wakePoll                            // the slow safety-net poll
	wakeReconnect                       // the listener (re)connected: notifications may have been missed
	wakeFallback                        // the listener receives no notifications: polling every FallbackPoll
)

func (r wakeReason) String() string {
	switch r {
	case wakeNotify:
		return "notify"
	case wakeExpiry:
		return "expiry"
	case wakePoll:
		return "poll"
	case wakeReconnect:
		return "reconnect"
	case wakeFallback:
		return "fallback"
	}
	return "unknown"
}
