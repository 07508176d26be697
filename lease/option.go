package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/lease/internal/leaseopt"
)

// ErrInvalidOption is matched by the error for an option a call refuses: an
// option given to a call it does not apply to, or a value out of range. A
// holder label refused by ValidateHolder matches ErrInvalidHolder too.
// Nothing was sent.
var ErrInvalidOption = errors.New("lease: invalid option")

// Option adjusts one call of a Manager (or a Leaser). Each option says
// which calls it applies to: a grant (Acquire, AcquireWait, Takeover,
// Resume, Run), Watch or List. Given to any other call it is refused with
// ErrInvalidOption before anything is sent. When an option is given twice
// the later one wins; a nil Option is ignored.
type Option func(*leaseopt.Options)

// grantOptions are the settings of one grant.
type grantOptions = leaseopt.Options

// WithHolder labels a grant with who holds it ("desktop", "browser"), so
// that Inspect, a refused caller's *HeldError and the status handler can say
// so. The label is stored with the grant and replaced by the next one; it
// is checked by ValidateHolder when the call is made. Empty means none.
// Grants only.
func WithHolder(label string) Option {
	return func(o *leaseopt.Options) {
		if o.Allow("WithHolder", leaseopt.Grant) {
			o.Holder = label
		}
	}
}

// WithWatchPoll sets the safety-net poll interval of the key's watch (the
// bound for changes that send no notification, see Watch). It applies when
// it starts the Manager's watch of the key; later watchers share that one.
// Values below 10ms are raised to 10ms. Watch only.
func WithWatchPoll(d time.Duration) Option {
	return func(o *leaseopt.Options) {
		if o.Allow("WithWatchPoll", leaseopt.Watch) {
			o.Poll = max(d, 10*time.Millisecond)
		}
	}
}

// WithAccount restricts List to one account, which must be a valid
// AccountID; "" lists every account (the default). List only.
func WithAccount(accountID string) Option {
	return func(o *leaseopt.Options) {
		if o.Allow("WithAccount", leaseopt.List) {
			o.Account = accountID
		}
	}
}

// WithHeldOnly makes List return only keys held now (unexpired on the
// database clock and not released). List only.
func WithHeldOnly() Option {
	return func(o *leaseopt.Options) {
		if o.Allow("WithHeldOnly", leaseopt.List) {
			o.HeldOnly = true
		}
	}
}

// WithAfter continues a listing: only keys after key in (AccountID,
// SessionID) order, as the database collates them. The zero Key starts
// from the first (the default); otherwise it must be a valid Key (the last
// one of the previous page). List only.
func WithAfter(key Key) Option {
	return func(o *leaseopt.Options) {
		if o.Allow("WithAfter", leaseopt.List) {
			o.AfterAccount, o.AfterSession = key.AccountID, key.SessionID
		}
	}
}

// WithLimit sets the most keys List returns, 1..MaxBatch (default
// DefaultListLimit). List only.
func WithLimit(n int) Option {
	return func(o *leaseopt.Options) {
		if o.Allow("WithLimit", leaseopt.List) {
			o.Limit, o.LimitSet = n, true
		}
	}
}

// applyOptions runs opts for call and refuses an option that does not
// apply to it.
func applyOptions(call leaseopt.Call, opts []Option) (leaseopt.Options, error) {
	o := leaseopt.Apply(call, opts)
	if o.Misplaced != "" {
		return o, fmt.Errorf("%w: %s does not apply to %s", ErrInvalidOption, o.Misplaced, call)
	}
	return o, nil
}

// grantOpts applies the options of a grant and validates the result.
func grantOpts(opts []Option) (grantOptions, error) {
	if len(opts) == 0 {
		return grantOptions{}, nil // the common call: nothing to apply, nothing allocated
	}
	o, err := applyOptions(leaseopt.Grant, opts)
	if err != nil {
		return o, err
	}
	if err := ValidateHolder(o.Holder); err != nil {
		return o, fmt.Errorf("%w: WithHolder: %w", ErrInvalidOption, err)
	}
	return o, nil
}
