package s3guard

import (
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
)

// TestVersionedBucket: in a bucket with versioning enabled, conditions
// apply to the latest version, so fencing works the same; removed data
// objects stay behind as noncurrent versions (delete markers on top).
func TestVersionedBucket(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		require.NoError(t, e.raw.EnableVersioning(testCtx(t), e.bucket))
		s := e.store(t, nil, nil)
		ctx := testCtx(t)
		const key = "versioned"

		i1, err := put(t, s, key, 1, "same")
		require.NoError(t, err)
		_, err = put(t, s, key, 2, "same")
		require.NoError(t, err)
		_, err = put(t, s, key, 1, "same")
		assert.ErrorIs(t, err, fence.ErrStale)

		_, err = s.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), key)
		require.NoError(t, err)
		_, _, err = s.GetBytes(ctx, key)
		assert.ErrorIs(t, err, fence.ErrNotFound)
		_, err = put(t, s, key, 2, "late")
		assert.ErrorIs(t, err, fence.ErrStale)

		i4, err := put(t, s, key, 4, "back")
		require.NoError(t, err)
		got, info := content(t, s, key)
		assert.Equal(t, "back", got)
		assert.Equal(t, i4.WriteID, info.WriteID)

		// The pointer removed outside the guard: the latest version is a
		// delete marker, If-Match gets 404, and the guard writes afresh (the
		// mark was erased with it, as documented).
		require.NoError(t, e.raw.RemoveObject(ctx, e.bucket, key, minio.RemoveObjectOptions{}))
		_, err = put(t, s, key, 1, "after removal")
		require.NoError(t, err)
		got, _ = content(t, s, key)
		assert.Equal(t, "after removal", got)

		// Token 1's first data object is no longer current but still stored.
		var versions int
		for obj := range e.raw.ListObjectsIter(ctx, e.bucket, minio.ListObjectsOptions{Prefix: i1.DataKey, WithVersions: true}) {
			require.NoError(t, obj.Err)
			versions++
		}
		assert.Equal(t, 2, versions, "data version plus delete marker")
	})
}
