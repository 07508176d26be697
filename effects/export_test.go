package effects

import "github.com/google/uuid"

// SetHooks installs test hooks on r before Start: afterClaim runs after a
// claim committed (it may block: a relay paused there); afterSend runs
// after the Deliverer returned, and true abandons the attempt without
// writing its outcome (a relay that died there).
func SetHooks(r *Relay, afterClaim func(id uuid.UUID, epoch int64), afterSend func(id uuid.UUID, epoch int64) bool) {
	r.hooks = relayHooks{afterClaim: afterClaim, afterSend: afterSend}
}
