package mcpfence

import (
	"time"

	"github.com/fencekit/fencekit/lease"
)

// CachedRun reports whether f's run cache (Config.RunCache) has an entry of
// run on key that a call would use now.
func CachedRun(f *Fence, key lease.Key, run string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.cache[key]
	return e != nil && e.id.String() == run && !e.dropped && time.Now().Before(e.trustUntil)
}

// CachedRuns is the number of entries in f's run cache.
func CachedRuns(f *Fence) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cache)
}
