package s3guard

import (
	"container/list"
	"sync"
)

// DefaultPointerCacheSize is the Config.PointerCacheSize used when none is
// set: the number of keys whose last seen pointer a Guard remembers.
const DefaultPointerCacheSize = 1024

// pointerCache remembers, per key, the last pointer this Guard read or wrote
// (its ETag and the fields needed to build and check the next pointer),
// least recently used first out once size keys are held. A nil
// *pointerCache is a disabled cache: get misses, put and drop do nothing.
//
// An entry is a hint, never the truth: Put and Delete decide against it and
// then commit with If-Match on its ETag, so a stale entry costs one failed
// conditional PUT (412 or 404) and a re-read, never a wrong acceptance.
type pointerCache struct {
	size int

	mu    sync.Mutex
	order *list.List // of *cacheEntry, most recently used in front
	byKey map[string]*list.Element
}

type cacheEntry struct {
	key string
	cur current
}

func newPointerCache(size int) *pointerCache {
	if size <= 0 {
		return nil
	}
	return &pointerCache{size: size, order: list.New(), byKey: make(map[string]*list.Element, min(size, 1024))}
}

// get returns the entry for key, marked as cached.
func (c *pointerCache) get(key string) (current, bool) {
	if c == nil {
		return current{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return current{}, false
	}
	c.order.MoveToFront(el)
	cur := el.Value.(*cacheEntry).cur
	cur.cached = true
	return cur, true
}

// put records cur (a pointer just read or written, or none: p nil) for key.
// Inline content and metadata are not kept, so that an entry stays small;
// the entry is then marked partial and cannot supply the content of a
// re-stamping write.
func (c *pointerCache) put(key string, cur current) {
	if c == nil {
		return
	}
	if cur.p != nil {
		if cur.etag == "" {
			c.drop(key) // nothing to send as If-Match
			return
		}
		p := *cur.p
		if len(p.Inline) > 0 || len(p.Metadata) > 0 {
			p.Inline, p.Metadata = nil, nil
			cur.partial = true
		}
		cur.p = &p
	}
	cur.cached = false
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		el.Value.(*cacheEntry).cur = cur
		c.order.MoveToFront(el)
		return
	}
	c.byKey[key] = c.order.PushFront(&cacheEntry{key: key, cur: cur})
	for c.order.Len() > c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.byKey, oldest.Value.(*cacheEntry).key)
	}
}

// drop forgets key.
func (c *pointerCache) drop(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.Remove(el)
		delete(c.byKey, key)
	}
}

// len returns the number of keys held.
func (c *pointerCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
