package s3guard

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
)

// recordingTransport records "METHOD <object key>" for every object request
// (not bucket-level ones such as the SDK's location lookup) and forwards it
// to next (http.DefaultTransport when nil).
type recordingTransport struct {
	bucket string
	next   http.RoundTripper

	mu  sync.Mutex
	log []string
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if key, ok := strings.CutPrefix(req.URL.Path, "/"+r.bucket+"/"); ok && key != "" {
		r.mu.Lock()
		r.log = append(r.log, req.Method+" "+key)
		r.mu.Unlock()
	}
	next := r.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(req)
}

// take returns the requests recorded since the last take, with data keys of
// key shortened to "<data>".
func (r *recordingTransport) take(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.log))
	for i, l := range r.log {
		method, k, _ := strings.Cut(l, " ")
		if strings.HasPrefix(k, DefaultDataPrefix+key+"/") {
			k = "<data>"
		}
		out[i] = method + " " + k
	}
	r.log = nil
	return out
}

// keysOf lists key and its data objects, of everything in the bucket.
func (e env) keysOf(t testing.TB, key string) []string {
	t.Helper()
	var out []string
	for _, k := range e.listAll(t) {
		if k == key || strings.HasPrefix(k, DefaultDataPrefix+key+"/") {
			out = append(out, k)
		}
	}
	return out
}

// TestPointerCacheSkipsRead shows the requests of a steady-state overwrite:
// with the cache, no pointer GET; without it, a GET first. A pointer the
// Guard only read (Get, Mark) is cached as well.
func TestPointerCacheSkipsRead(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		const key = "requests"
		for _, tc := range []struct {
			name   string
			mod    func(*Config)
			steady []string
		}{
			{"cache", nil, []string{"PUT <data>", "PUT " + key, "DELETE <data>"}},
			{"nocache", func(c *Config) { c.PointerCacheSize = -1 }, []string{"GET " + key, "PUT <data>", "PUT " + key, "DELETE <data>"}},
			{"cache-inline", func(c *Config) { c.InlineMax = 16 }, []string{"PUT " + key}},
			{"nocache-inline", func(c *Config) { c.InlineMax = 16; c.PointerCacheSize = -1 }, []string{"GET " + key, "PUT " + key}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rt := &recordingTransport{bucket: e.bucket}
				s := e.store(t, e.newClient(t, rt), tc.mod)
				_, err := put(t, s, key, 1, "first")
				require.NoError(t, err)
				assert.Equal(t, "GET "+key, rt.take(key)[0], "a write to a key this Guard never saw reads the pointer")
				_, err = put(t, s, key, 1, "second")
				require.NoError(t, err)
				assert.Equal(t, tc.steady, rt.take(key))
				got, info := content(t, s, key)
				assert.Equal(t, "second", got)
				assert.Equal(t, fence.Token(1), info.Token)
			})
		}

		t.Run("observed", func(t *testing.T) {
			const key = "requests/observed"
			other := e.store(t, e.newClient(t, nil), nil)
			_, err := put(t, other, key, 4, "theirs")
			require.NoError(t, err)
			rt := &recordingTransport{bucket: e.bucket}
			s := e.store(t, e.newClient(t, rt), nil)
			tok, err := s.Mark(testCtx(t), key)
			require.NoError(t, err)
			assert.Equal(t, fence.Token(4), tok.Token)
			rt.take(key)
			_, err = put(t, s, key, 5, "mine")
			require.NoError(t, err)
			assert.Equal(t, []string{"PUT <data>", "PUT " + key, "DELETE <data>"}, rt.take(key),
				"the pointer Mark read is cached: no GET, no failed PUT")
		})
	})
}

// TestPointerCacheStale: store A's cache is stale because store B (another
// client, as another process) wrote in between. A's write is decided
// tentatively on its cache, its If-Match fails, and it continues on a
// fresh read: refused when B's token is higher, accepted on top when it is
// equal. Final states and leftovers are checked, inline and not.
func TestPointerCacheStale(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		for _, inline := range []bool{false, true} {
			mode := map[bool]string{false: "data", true: "inline"}[inline]
			mod := func(c *Config) {
				if inline {
					c.InlineMax = 64
				}
			}
			// dataObjects lists the data objects of key.
			dataObjects := func(t *testing.T, key string) []string {
				var out []string
				for _, k := range e.listAll(t) {
					if strings.HasPrefix(k, DefaultDataPrefix+key+"/") {
						out = append(out, k)
					}
				}
				return out
			}
			wantData := func(in Info) []string {
				if in.DataKey == "" {
					return nil
				}
				return []string{in.DataKey}
			}

			t.Run(mode+"/higher", func(t *testing.T) {
				key := "stale/higher/" + mode
				ft := &faultyTransport{match: pathIs(e.bucket, key)}
				a := e.store(t, e.newClient(t, ft), mod)
				b := e.store(t, e.newClient(t, nil), mod)
				_, err := put(t, a, key, 5, "a5")
				require.NoError(t, err)
				b6, err := put(t, b, key, 6, "b6")
				require.NoError(t, err)

				_, err = put(t, a, key, 5, "a5-late")
				se, ok := fence.IsStale(err)
				require.True(t, ok, "want stale, got %v", err)
				assert.Equal(t, fence.StaleError{Resource: key, Presented: 5, Highest: 6}, *se)
				assert.Equal(t, []int{http.StatusOK, http.StatusPreconditionFailed}, ft.seen(),
					"the tentative accept on A's cache was refused by If-Match")
				got, info := content(t, b, key)
				assert.Equal(t, "b6", got)
				assert.Equal(t, b6.WriteID, info.WriteID)
				assert.Equal(t, wantData(b6), dataObjects(t, key), "A's staged data was removed")

				// A's cache now knows token 6: refused again, nothing written.
				before := e.snapshot(t)
				_, err = put(t, a, key, 5, "a5-again")
				assert.ErrorIs(t, err, fence.ErrStale)
				assert.Len(t, ft.seen(), 2, "no pointer PUT for a refusal the cache knows")
				assert.Equal(t, before, e.snapshot(t))
			})

			t.Run(mode+"/equal", func(t *testing.T) {
				key := "stale/equal/" + mode
				ft := &faultyTransport{match: pathIs(e.bucket, key)}
				a := e.store(t, e.newClient(t, ft), mod)
				b := e.store(t, e.newClient(t, nil), mod)
				_, err := put(t, a, key, 5, "a5")
				require.NoError(t, err)
				_, err = put(t, b, key, 5, "b5")
				require.NoError(t, err)
				a2, err := put(t, a, key, 5, "a5-second")
				require.NoError(t, err)
				assert.Equal(t, []int{http.StatusOK, http.StatusPreconditionFailed, http.StatusOK}, ft.seen(),
					"stale cache: 412, re-read, equal token accepted on top")
				got, info := content(t, b, key)
				assert.Equal(t, "a5-second", got)
				assert.Equal(t, a2.WriteID, info.WriteID)
				assert.Equal(t, wantData(a2), dataObjects(t, key), "B's superseded data removed, nothing left over")
			})

			t.Run(mode+"/higher-presented", func(t *testing.T) {
				key := "stale/raise/" + mode
				ft := &faultyTransport{match: pathIs(e.bucket, key)}
				a := e.store(t, e.newClient(t, ft), mod)
				b := e.store(t, e.newClient(t, nil), mod)
				_, err := put(t, a, key, 5, "a5")
				require.NoError(t, err)
				_, err = put(t, b, key, 7, "b7")
				require.NoError(t, err)
				a8, err := put(t, a, key, 8, "a8")
				require.NoError(t, err)
				assert.Equal(t, []int{http.StatusOK, http.StatusPreconditionFailed, http.StatusOK}, ft.seen())
				got, info := content(t, b, key)
				assert.Equal(t, "a8", got)
				assert.Equal(t, fence.Token(8), info.Token)
				assert.Equal(t, a8.WriteID, info.WriteID)
				_, err = put(t, b, key, 7, "b7-late")
				assert.ErrorIs(t, err, fence.ErrStale, "B's cache is stale the other way round")
			})
		}

		t.Run("tombstone", func(t *testing.T) {
			const key = "stale/tombstone"
			a := e.store(t, e.newClient(t, nil), nil)
			b := e.store(t, e.newClient(t, nil), nil)
			_, err := put(t, a, key, 5, "a5")
			require.NoError(t, err)
			_, err = b.Delete(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 6)), key)
			require.NoError(t, err)
			_, err = put(t, a, key, 5, "late")
			se, ok := fence.IsStale(err)
			require.True(t, ok, "want stale, got %v", err)
			assert.Equal(t, fence.Token(6), se.Highest)
			_, err = a.Delete(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 5)), key)
			assert.ErrorIs(t, err, fence.ErrStale)
			assert.Equal(t, []string{key}, e.keysOf(t, key), "only the tombstone")
			_, err = put(t, a, key, 6, "a6")
			require.NoError(t, err)
			got, _ := content(t, b, key)
			assert.Equal(t, "a6", got)
		})

		t.Run("negative", func(t *testing.T) {
			// A cached "no pointer" (A saw the key empty) is stale once B
			// created it: If-None-Match: * fails and A decides on B's pointer.
			const key = "stale/negative"
			ft := &faultyTransport{match: pathIs(e.bucket, key)}
			a := e.store(t, e.newClient(t, ft), nil)
			b := e.store(t, e.newClient(t, nil), nil)
			tok, err := a.Mark(testCtx(t), key)
			require.NoError(t, err)
			require.Zero(t, tok.Token)
			b6, err := put(t, b, key, 6, "b6")
			require.NoError(t, err)
			_, err = put(t, a, key, 5, "a5")
			se, ok := fence.IsStale(err)
			require.True(t, ok, "want stale, got %v", err)
			assert.Equal(t, fence.StaleError{Resource: key, Presented: 5, Highest: 6}, *se)
			assert.Equal(t, []int{http.StatusPreconditionFailed}, ft.seen())
			assert.ElementsMatch(t, []string{key, b6.DataKey}, e.keysOf(t, key))
		})

		t.Run("erased", func(t *testing.T) {
			// The pointer is removed outside the guard after A cached it: the
			// mark is erased, as documented, whether A's cache knows or not.
			const key = "stale/erased"
			ft := &faultyTransport{match: pathIs(e.bucket, key)}
			a := e.store(t, e.newClient(t, ft), nil)
			_, err := put(t, a, key, 3, "three")
			require.NoError(t, err)
			require.NoError(t, e.raw.RemoveObject(testCtx(t), e.bucket, key, minio.RemoveObjectOptions{}))
			// Above the cached mark: If-Match on the vanished pointer → 404.
			_, err = put(t, a, key, 4, "four")
			require.NoError(t, err)
			assert.Equal(t, []int{http.StatusOK, http.StatusNotFound, http.StatusOK}, ft.seen())
			got, info := content(t, a, key)
			assert.Equal(t, "four", got)
			assert.Equal(t, fence.Token(4), info.Token)
			// Below the cached mark: the refusal is confirmed by a read, which
			// finds no pointer, so the write is accepted.
			require.NoError(t, e.raw.RemoveObject(testCtx(t), e.bucket, key, minio.RemoveObjectOptions{}))
			_, err = put(t, a, key, 1, "one")
			require.NoError(t, err)
			got, info = content(t, a, key)
			assert.Equal(t, "one", got)
			assert.Equal(t, fence.Token(1), info.Token)
		})
	})
}

// TestPointerCacheLostReply: the lost-reply cases of TestLostReplyRetry with
// a warm cache (the Guard wrote the key before, so it skips the pointer GET).
func TestPointerCacheLostReply(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {

		t.Run("ours", func(t *testing.T) {
			const key = "cache-lost/ours"
			ft := &faultyTransport{match: pathIs(e.bucket, key), drop: map[int]bool{2: true}}
			rt := &recordingTransport{bucket: e.bucket, next: ft}
			s := e.store(t, e.newClient(t, rt), nil)
			prev, err := put(t, s, key, 3, "before")
			require.NoError(t, err)
			rt.take(key)
			info, err := put(t, s, key, 4, "mine")
			require.NoError(t, err, "a landed write whose reply was lost is a success")
			assert.Equal(t, []int{http.StatusOK, http.StatusOK, http.StatusPreconditionFailed}, ft.seen())
			assert.Equal(t, []string{"PUT <data>", "PUT " + key, "PUT " + key, "GET " + key, "DELETE <data>"}, rt.take(key),
				"no pointer GET before the commit; the 412 of the SDK's retry is resolved by one re-read")
			got, gi := content(t, e.store(t, nil, nil), key)
			assert.Equal(t, "mine", got)
			assert.Equal(t, info.WriteID, gi.WriteID)
			assert.ElementsMatch(t, []string{key, info.DataKey}, e.keysOf(t, key))
			assert.NotEqual(t, prev.DataKey, info.DataKey)
		})

		t.Run("someone-else", func(t *testing.T) {
			// A newer holder's write lands just before our cached-If-Match PUT
			// reaches MinIO: a genuine 412, a stale refusal.
			const key = "cache-lost/other"
			other := e.store(t, e.newClient(t, nil), nil)
			var theirs Info
			ft := &faultyTransport{match: pathIs(e.bucket, key), before: func(attempt int) {
				if attempt == 2 {
					var err error
					theirs, err = put(t, other, key, 9, "theirs")
					require.NoError(t, err)
				}
			}}
			s := e.store(t, e.newClient(t, ft), nil)
			_, err := put(t, s, key, 8, "before")
			require.NoError(t, err)
			_, err = put(t, s, key, 8, "mine")
			se, ok := fence.IsStale(err)
			require.True(t, ok, "want stale, got %v", err)
			assert.Equal(t, fence.StaleError{Resource: key, Presented: 8, Highest: 9}, *se)
			assert.Equal(t, []int{http.StatusOK, http.StatusPreconditionFailed}, ft.seen())
			got, gi := content(t, other, key)
			assert.Equal(t, "theirs", got)
			assert.Equal(t, theirs.WriteID, gi.WriteID)
			assert.ElementsMatch(t, []string{key, theirs.DataKey}, e.keysOf(t, key))
		})

		t.Run("counted", func(t *testing.T) {
			// The conditional PUT decided on a stale cache entry counts
			// against MaxAttempts like every other: with 1 the call ends
			// busy after it, with 2 the second (on the pointer read) lands.
			const key = "cache-lost/attempts"
			for _, max := range []int{1, 2} {
				ft := &faultyTransport{match: pathIs(e.bucket, key)}
				a := e.store(t, e.newClient(t, ft), func(c *Config) { c.MaxAttempts = max })
				b := e.store(t, e.newClient(t, nil), nil)
				_, err := put(t, a, key, 2, "a")
				require.NoError(t, err)
				_, err = put(t, b, key, 2, "b")
				require.NoError(t, err)
				_, err = put(t, a, key, 2, "a-again")
				got, _ := content(t, b, key)
				if max == 1 {
					require.ErrorIs(t, err, fence.ErrBusy)
					assert.Equal(t, []int{http.StatusOK, http.StatusPreconditionFailed}, ft.seen())
					assert.Equal(t, "b", got)
					continue
				}
				require.NoError(t, err)
				assert.Equal(t, []int{http.StatusOK, http.StatusPreconditionFailed, http.StatusOK}, ft.seen())
				assert.Equal(t, "a-again", got)
			}
		})
	})
}

// TestPointerCacheRestamp: a Fence that stages nothing copies the current
// content into the new pointer. A cache entry holds no inline bytes or
// metadata, so a re-stamp decided on it reads the full pointer first and the
// content survives.
func TestPointerCacheRestamp(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		const key = "restamp"
		s := e.store(t, nil, func(c *Config) { c.InlineMax = 64 })
		ctx := testCtx(t)
		_, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 1)), key, []byte("inline bytes"), PutOptions{ContentType: "text/plain", Metadata: map[string]string{"k": "v"}})
		require.NoError(t, err)
		cur, ok := s.cache.get(key)
		require.True(t, ok)
		require.True(t, cur.partial)
		assert.Nil(t, cur.p.Inline)
		// The cache path, as Put and Delete take it, with a write that stages
		// nothing (unreachable through Put; Fence itself never uses the cache).
		c := fence.Claim{Token: 2}
		info, err := s.write(ctx, key, &c, engine.ReadAny, func(context.Context) error { return nil })
		require.NoError(t, err)
		assert.Equal(t, fence.Token(2), info.Token)
		got, gi := content(t, s, key)
		assert.Equal(t, "inline bytes", got)
		assert.Equal(t, map[string]string{"k": "v"}, gi.Metadata)
		assert.Equal(t, "text/plain", gi.ContentType)
	})
}

// TestPointerCacheBounded: the cache holds at most its size, evicting the
// least recently used key; New maps 0 to the default and negative to off.
func TestPointerCacheBounded(t *testing.T) {
	ptr := func(tok fence.Token) current {
		return current{p: &pointer{Format: PointerFormat, Token: tok, WriteID: newWriteID(), Deleted: true}, etag: fmt.Sprint("etag-", tok)}
	}
	c := newPointerCache(2)
	c.put("a", ptr(1))
	c.put("b", ptr(2))
	_, ok := c.get("a") // a is now the most recently used
	require.True(t, ok)
	c.put("c", ptr(3))
	assert.Equal(t, 2, c.len())
	_, ok = c.get("b")
	assert.False(t, ok, "b was the least recently used")
	got, ok := c.get("a")
	require.True(t, ok)
	assert.True(t, got.cached)
	assert.Equal(t, fence.Token(1), got.token())
	c.put("a", ptr(4)) // replace in place
	got, _ = c.get("a")
	assert.Equal(t, fence.Token(4), got.token())
	assert.Equal(t, 2, c.len())
	c.put("c", current{p: ptr(5).p}) // no ETag: nothing to If-Match on
	_, ok = c.get("c")
	assert.False(t, ok)
	c.drop("a")
	assert.Equal(t, 0, c.len())
	c.put("none", current{}) // "no pointer" is remembered too
	got, ok = c.get("none")
	require.True(t, ok)
	assert.Nil(t, got.p)

	// An entry keeps neither inline content nor metadata, and does not
	// alias the pointer it was made from.
	p := &pointer{Format: PointerFormat, Token: 1, WriteID: newWriteID(), Inline: []byte("x"), Size: 1, Metadata: map[string]string{"a": "b"}}
	c.put("inline", current{p: p, etag: "e"})
	got, _ = c.get("inline")
	assert.True(t, got.partial)
	assert.Nil(t, got.p.Inline)
	assert.Nil(t, got.p.Metadata)
	assert.Equal(t, []byte("x"), p.Inline)

	var disabled *pointerCache
	disabled.put("a", ptr(1))
	_, ok = disabled.get("a")
	assert.False(t, ok)
	assert.Nil(t, newPointerCache(0))

	e := env{client: minioclient.New(&minio.Client{}), bucket: "b"}
	for size, want := range map[int]int{0: DefaultPointerCacheSize, 7: 7} {
		s := e.store(t, nil, func(c *Config) { c.PointerCacheSize = size })
		require.NotNil(t, s.cache)
		assert.Equal(t, want, s.cache.size)
	}
	assert.Nil(t, e.store(t, nil, func(c *Config) { c.PointerCacheSize = -1 }).cache)
}

// TestPointerCacheBoundedUnderLoad: a Guard writing more keys than its cache
// holds stays within the bound and every key keeps working (evicted keys
// are read again).
func TestPointerCacheBoundedUnderLoad(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, func(c *Config) { c.PointerCacheSize = 3; c.InlineMax = 16 })
		other := e.store(t, e.newClient(t, nil), func(c *Config) { c.InlineMax = 16 })
		for round := fence.Token(1); round <= 3; round++ {
			for i := range 6 {
				key := fmt.Sprintf("load/%d", i)
				_, err := put(t, s, key, round, fmt.Sprint("s", round))
				require.NoError(t, err)
				assert.LessOrEqual(t, s.cache.len(), 3)
			}
			// Another store moves every key on: evicted or cached alike, the
			// next round must decide correctly.
			for i := range 6 {
				_, err := put(t, other, fmt.Sprintf("load/%d", i), round+1, "o")
				require.NoError(t, err)
			}
			for i := range 6 {
				_, err := put(t, s, fmt.Sprintf("load/%d", i), round, "late")
				se, ok := fence.IsStale(err)
				require.True(t, ok, "key %d round %d: want stale, got %v", i, round, err)
				assert.Equal(t, round+1, se.Highest)
			}
		}
	})
}
