package lease

import "time"

// observer is the seam for metrics and tracing. Every method is
// called synchronously from the Manager's goroutines and must not block.
// The default is noopObserver; tests install a recording one.
type observer interface {
	acquired(k Key, token int64, d time.Duration)
	held(k Key, d time.Duration)
	acquireFailed(k Key, err error)
	renewBatch(n, renewed, lost int, d time.Duration, err error)
	lost(k Key, cause error)
	released(k Key, result ReleaseResult, err error)
	waiting(k Key)
	woken(k Key, reason wakeReason)
	listener(connected bool, err error)
}

type noopObserver struct{}

func (noopObserver) acquired(Key, int64, time.Duration)             {}
func (noopObserver) held(Key, time.Duration)                        {}
func (noopObserver) acquireFailed(Key, error)                       {}
func (noopObserver) renewBatch(int, int, int, time.Duration, error) {}
func (noopObserver) lost(Key, error)                                {}
func (noopObserver) released(Key, ReleaseResult, error)             {}
func (noopObserver) waiting(Key)                                    {}
func (noopObserver) woken(Key, wakeReason)                          {}
func (noopObserver) listener(bool, error)                           {}

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
