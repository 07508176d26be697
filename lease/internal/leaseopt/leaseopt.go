// Package leaseopt holds what a lease.Option sets, so that package lease
// and the Router of lease/leaseops read one call's options the same way.
// It is internal: the only way to set these fields is a lease.Option.
package leaseopt

import "time"

// Call is the kind of Manager call an option is given to; an option names
// the calls it applies to as a set of Calls.
type Call uint8

// The calls that take options.
const (
	// Grant is Acquire, AcquireWait, Takeover, Resume and Run.
	Grant Call = 1 << iota
	// Watch is Manager.Watch.
	Watch
	// List is Manager.List.
	List
)

// String names the call for an error message.
func (c Call) String() string {
	switch c {
	case Grant:
		return "a grant"
	case Watch:
		return "Watch"
	case List:
		return "List"
	}
	return "an unknown call"
}

// Options are the settings of one call. A field an option did not set is
// its zero value.
type Options struct {
	// Call is the call being configured (set before any option runs).
	Call Call
	// Misplaced names the first option given to a call it does not apply
	// to; the call refuses it.
	Misplaced string

	// Holder is WithHolder's label (grants).
	Holder string
	// Poll is WithWatchPoll's interval (Watch).
	Poll time.Duration
	// Account is WithAccount's account (List); "" is every account.
	Account string
	// HeldOnly is WithHeldOnly (List).
	HeldOnly bool
	// AfterAccount and AfterSession are WithAfter's key (List); both ""
	// start from the first key.
	AfterAccount, AfterSession string
	// Limit is WithLimit's value (List) when LimitSet.
	Limit    int
	LimitSet bool
}

// Allow reports whether the option called name, which applies to the
// calls in calls, applies to this one; if not it records name in
// Misplaced (the first one only) and the option must set nothing.
func (o *Options) Allow(name string, calls Call) bool {
	if o.Call&calls != 0 {
		return true
	}
	if o.Misplaced == "" {
		o.Misplaced = name
	}
	return false
}

// Apply runs opts (nil ones skipped) on the Options of call: the one loop
// package lease and the Router read a call's options with.
func Apply[F ~func(*Options)](call Call, opts []F) Options {
	o := Options{Call: call}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}
