package effects

import (
	"context"

	"github.com/google/uuid"
)

// SetHooks installs test hooks on r before Start: afterClaim runs after a
// claim committed (it may block: a relay paused there); afterSend runs
// after the Deliverer returned, and true abandons the attempt without
// writing its outcome (a relay that died there).
func SetHooks(r *Relay, afterClaim func(id uuid.UUID, epoch int64), afterSend func(id uuid.UUID, epoch int64) bool) {
	r.hooks = relayHooks{afterClaim: afterClaim, afterSend: afterSend}
}

// WriteDelivered writes, in one outcomes statement, the outcome delivered
// with codes[i] for ids[i] under epoch 0 (an effect no relay has claimed),
// and returns writeOutcomes' error per outcome.
func WriteDelivered(r *Relay, ids []uuid.UUID, codes []int) []error {
	outs := make([]outcome, len(ids))
	for i, id := range ids {
		outs[i] = outcome{c: claimed{id: id}, state: StateDelivered, res: Result{Code: codes[i]}}
	}
	return r.writeOutcomes(context.Background(), outs)
}
