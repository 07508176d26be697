package guardtest

// The checks Checks reaches are unexported; the package's own tests call
// some of them directly.
var (
	CheckFenceClaim       = checkFenceClaim
	CheckFenceMissing     = checkFenceMissing
	CheckLinearizable     = checkLinearizable
	CheckOutcomeUnknown   = checkOutcomeUnknown
	CheckStrictScope      = checkStrictScope
	CheckDelayedDuplicate = checkDelayedDuplicate
)
