package s3guard

import (
	"bytes"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
)

// TestIdenticalBytesABA is the identical-bytes case (docs/guards-s3.md): token
// 7 writes X, token 8 writes the same bytes X, and a writer still holding
// token 7 must be refused — both when it starts after 8's write and when it
// read the pointer before 8's write (the ABA interleaving, driven by a hook).
// It runs with the pointer cache on (the stale writer's cache still holds
// its own token-7 pointer, so its decision is tentative and the If-Match
// refuses it) and off (every decision on a fresh read).
func TestIdenticalBytesABA(t *testing.T) {
	forEachKind(t, func(t *testing.T, kind clientKind) {
		for _, cache := range cacheModes {
			t.Run(cache.name, func(t *testing.T) { testIdenticalBytesABA(t, newEnv(t, kind), cache.size) })
		}
	})
}

// cacheModes are the Config.PointerCacheSize values tests run with.
var cacheModes = []struct {
	name string
	size int
}{{"cache", 0}, {"nocache", -1}}

func testIdenticalBytesABA(t *testing.T, e env, cacheSize int) {
	withCache := func(c *Config) { c.PointerCacheSize = cacheSize }
	old := e.store(t, e.newClient(t, nil), withCache) // the paused holder of token 7
	cur := e.store(t, e.newClient(t, nil), withCache) // the new holder of token 8
	x := bytes.Repeat([]byte("identical bytes "), 256)

	assertRefused := func(t *testing.T, err error, key string) {
		t.Helper()
		se, ok := fence.IsStale(err)
		require.True(t, ok, "want *fence.StaleError, got %v", err)
		assert.Equal(t, fence.StaleError{Resource: key, Presented: 7, Highest: 8}, *se)
	}

	t.Run("after", func(t *testing.T) {
		const key = "aba/after"
		i7, err := old.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 7)), key, x, PutOptions{})
		require.NoError(t, err)
		_, p7, err := e.rawGet(t, key)
		require.NoError(t, err)
		i8, err := cur.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 8)), key, x, PutOptions{})
		require.NoError(t, err)
		_, p8, err := e.rawGet(t, key)
		require.NoError(t, err)
		// The hazard is real: the content ETag (MD5) did not change...
		assert.Equal(t, i7.ETag, i8.ETag, "identical bytes must give identical content ETags")
		// ...but the pointer's did, because its body holds a fresh write id.
		assert.NotEqual(t, p7.ETag, p8.ETag)

		_, err = old.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 7)), key, x, PutOptions{})
		assertRefused(t, err, key)
		got, info := content(t, cur, key)
		assert.Equal(t, string(x), got)
		assert.Equal(t, fence.Token(8), info.Token)
		assert.Equal(t, i8.WriteID, info.WriteID)
	})

	t.Run("interleaved", func(t *testing.T) {
		const key = "aba/interleaved"
		_, err := old.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 7)), key, x, PutOptions{})
		require.NoError(t, err)

		// The stale writer reads the pointer (token 7), then pauses.
		readDone, resume := make(chan struct{}), make(chan struct{})
		reads := 0
		old.afterRead = func(string) {
			reads++
			if reads == 1 {
				close(readDone)
				<-resume
			}
		}
		defer func() { old.afterRead = nil }()
		res := make(chan error, 1)
		go func() {
			_, err := old.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 7)), key, x, PutOptions{})
			res <- err
		}()
		<-readDone
		// Meanwhile token 8 writes byte-identical content.
		i8, err := cur.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 8)), key, x, PutOptions{})
		require.NoError(t, err)
		close(resume)
		err = <-res

		assertRefused(t, err, key)
		assert.Equal(t, 2, reads, "the stale writer must have reached its conditional write and re-read")
		got, info := content(t, cur, key)
		assert.Equal(t, string(x), got)
		assert.Equal(t, fence.Token(8), info.Token)
		assert.Equal(t, i8.WriteID, info.WriteID)
		// The refused writer removed the data object it had staged.
		var keys []string
		for _, k := range e.listAll(t) {
			if k == key || strings.HasPrefix(k, DefaultDataPrefix+key+"/") {
				keys = append(keys, k)
			}
		}
		assert.ElementsMatch(t, []string{key, i8.DataKey}, keys)
	})
}

// TestNaiveMetadataTokenABA shows, on the real MinIO, that the design the
// guard avoids — the token in object metadata plus If-Match on the content
// ETag — accepts the stale write of TestIdenticalBytesABA. It guards the
// meaning of that test: if MinIO ever changed ETags on metadata, this test
// would fail and tell us.
func TestNaiveMetadataTokenABA(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		const key = "naive"
		x := bytes.Repeat([]byte("identical bytes "), 256)
		withToken := func(tok string) minio.PutObjectOptions {
			return minio.PutObjectOptions{UserMetadata: map[string]string{"Fencekit-Token": tok}}
		}
		// Token 7 writes X.
		w7, err := e.rawPut(t, key, x, withToken("7"))
		require.NoError(t, err)
		// The stale writer reads state: ETag E, token 7 — admitted for token 7.
		seen, err := e.raw.StatObject(testCtx(t), e.bucket, key, minio.StatObjectOptions{})
		require.NoError(t, err)
		require.Equal(t, "7", seen.UserMetadata["Fencekit-Token"])
		// Token 8 writes identical bytes (conditionally, as a naive guard would).
		o8 := withToken("8")
		o8.SetMatchETag(seen.ETag)
		w8, err := e.rawPut(t, key, x, o8)
		require.NoError(t, err)
		assert.Equal(t, w7.ETag, w8.ETag, "metadata does not change the ETag")
		// The stale writer's If-Match: E still passes.
		o7 := withToken("7")
		o7.SetMatchETag(seen.ETag)
		_, err = e.rawPut(t, key, x, o7)
		require.NoError(t, err, "the naive design accepts the stale write")
		after, err := e.raw.StatObject(testCtx(t), e.bucket, key, minio.StatObjectOptions{})
		require.NoError(t, err)
		assert.Equal(t, "7", after.UserMetadata["Fencekit-Token"], "token 8's mark was overwritten by stale token 7")
	})
}
