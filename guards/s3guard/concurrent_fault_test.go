package s3guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestFaultWritersConcurrent: the subject's OutcomeWriter and
// DuplicateWriter run from several goroutines at once on different
// resources (under -race), each with the outcome it has alone.
func TestFaultWritersConcurrent(t *testing.T) {
	sub := newSubject(t, newEnv(t, clientKinds[0]), false, func(*Config) {})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			r := fmt.Sprintf("conc/held/%d", i)
			hctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var applied atomic.Bool
			if err := sub.WriteHeld(hctx, r, 3, "held", func() { applied.Store(true); cancel() }); err != nil && !errors.Is(err, fence.ErrOutcomeUnknown) {
				t.Errorf("WriteHeld(%q): %v", r, err)
			}
			if !applied.Load() {
				t.Errorf("WriteHeld(%q): its reply was not held (applied never called)", r)
			}
			if v, tok, ok, err := sub.Read(ctx, r); err != nil || !ok || v != "held" || tok != 3 {
				t.Errorf("after WriteHeld(%q): %q %d %v %v", r, v, tok, ok, err)
			}
		}()
		go func() {
			defer wg.Done()
			r := fmt.Sprintf("conc/delayed/%d", i)
			c := fence.Claim{Token: 5, Run: "run-a"}
			deliver, err := sub.WriteDelayed(ctx, r, c, "first")
			if err != nil && !errors.Is(err, fence.ErrOutcomeUnknown) && !errors.Is(err, fence.ErrNotApplied) {
				t.Errorf("WriteDelayed(%q): %v", r, err)
			}
			if err := sub.WriteClaim(ctx, r, c, "later"); err != nil {
				t.Errorf("WriteClaim(%q): %v", r, err)
			}
			if deliver == nil {
				t.Errorf("WriteDelayed(%q): no deliver function", r)
				return
			}
			if err := deliver(ctx); err != nil {
				t.Errorf("deliver(%q): %v", r, err)
			}
			if v, tok, ok, err := sub.Read(ctx, r); err != nil || !ok || v != "later" || tok != 5 {
				t.Errorf("after the held copy of %q: %q %d %v %v", r, v, tok, ok, err)
			}
		}()
	}
	wg.Wait()
}
