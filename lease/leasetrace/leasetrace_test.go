package leasetrace_test

import (
	"strings"
	"testing"

	"github.com/fencekit/fencekit/lease/leasetrace"
)

// TestNamespace: every span name and attribute key is fencekit.lease.*, so
// a trace query can select the lease's spans; outcomes are bare words.
func TestNamespace(t *testing.T) {
	for _, v := range []string{
		leasetrace.SpanAcquire, leasetrace.SpanAcquireWait, leasetrace.SpanTakeover, leasetrace.SpanRelease,
		leasetrace.SpanRenew, leasetrace.SpanRenewBatch, leasetrace.SpanHeartbeat, leasetrace.SpanRun, leasetrace.SpanLost,
		leasetrace.AttrAccountID, leasetrace.AttrSessionID, leasetrace.AttrRunID, leasetrace.AttrToken,
		leasetrace.AttrHolder, leasetrace.AttrOutcome, leasetrace.AttrDisplacedRunID, leasetrace.AttrHeldByRunID,
		leasetrace.AttrHeldByToken, leasetrace.AttrCause, leasetrace.AttrManagerID, leasetrace.AttrBatchLeases,
		leasetrace.AttrBatchRenewed, leasetrace.AttrBatchLost, leasetrace.AttrTrustDeadlineIn,
	} {
		if !strings.HasPrefix(v, "fencekit.lease.") {
			t.Errorf("%q is not named fencekit.lease.*", v)
		}
	}
}
