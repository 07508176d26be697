package objstage

import (
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// NotFoundMessage is the message of a guard's NotFoundError: resource has
// no content; with deleted, a tombstone under token is in place.
func NotFoundMessage(prefix, resource string, deleted bool, token fence.Token) string {
	if deleted {
		return fmt.Sprintf("%s: %q not found: deleted under token %d", prefix, resource, token)
	}
	return fmt.Sprintf("%s: %q not found", prefix, resource)
}

// SizeMessage is the message of a guard's SizeError: content of resource
// declared as size bytes, of which read were seen.
func SizeMessage(prefix, resource string, size, read int64) string {
	if read > size {
		return fmt.Sprintf("%s: %q: content longer than its declared size of %d bytes", prefix, resource, size)
	}
	return fmt.Sprintf("%s: %q: content of %d bytes, declared size %d", prefix, resource, read, size)
}
