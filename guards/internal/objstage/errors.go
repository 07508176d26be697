package objstage

import (
	"fmt"
)

// SizeMessage is the message of a guard's SizeError: content of resource
// declared as size bytes, of which read were seen.
func SizeMessage(prefix, resource string, size, read int64) string {
	if read > size {
		return fmt.Sprintf("%s: %q: content longer than its declared size of %d bytes", prefix, resource, size)
	}
	return fmt.Sprintf("%s: %q: content of %d bytes, declared size %d", prefix, resource, read, size)
}
