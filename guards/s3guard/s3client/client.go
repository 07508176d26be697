// Package s3client is the small S3 API through which s3guard talks to a
// bucket, so that the guard works with the SDK its user already has. The
// adapters in guards/s3guard/minioclient (minio-go v7) and
// guards/s3guard/awsclient (aws-sdk-go-v2) implement it; another SDK needs
// the same five operations.
//
// What an implementation must guarantee, because the guard's safety rests on
// it:
//
//   - Put honours PutOptions.IfMatch and IfNoneMatch on the server (one
//     conditional request; never emulated with a read before the write).
//   - Get is one request: the body and the ETag it returns belong to the same
//     version of the object, and GetOptions.IfMatch is sent to the server.
//   - Errors are classified: a missing object matches ErrNotFound, a failed
//     precondition (412) ErrPreconditionFailed, a 409 conditional conflict
//     ErrConflict, each wrapping the SDK's own error. Other errors are
//     returned as the SDK reports them.
//   - ETags are returned without surrounding quotes; metadata keys are lower
//     case and without the x-amz-meta- prefix.
//   - Every call checks its key with CheckKey first and sends nothing for a
//     key it refuses.
//
// Not guaranteed: retries. An SDK may retry a request whose reply was lost;
// s3guard is written for that (its conditional writes carry unique write ids
// that identify an attempt that landed).
package s3client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
)

// Client is the part of the S3 API s3guard uses. Implementations are safe for
// concurrent use.
type Client interface {
	// Put stores size bytes from body at key (size -1: unknown length) under
	// the conditions in opts and returns the new object's ETag and size.
	Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts PutOptions) (ObjectInfo, error)
	// Get reads key in one request. The caller closes the body.
	Get(ctx context.Context, bucket, key string, opts GetOptions) (io.ReadCloser, ObjectInfo, error)
	// Head returns key's ETag, size and user metadata.
	Head(ctx context.Context, bucket, key string) (ObjectInfo, error)
	// Delete removes key. Removing a missing key is not an error.
	Delete(ctx context.Context, bucket, key string) error
	// List yields, in lexical order, the keys of the objects whose key
	// starts with prefix and has no '/' after it. Iteration stops at the
	// first error, which is yielded with an empty key.
	List(ctx context.Context, bucket, prefix string) iter.Seq2[string, error]
}

// PutOptions are the conditions and headers of a Put.
type PutOptions struct {
	// ContentType is the object's Content-Type (empty: the SDK's default).
	ContentType string
	// Metadata is stored as x-amz-meta-* headers; keys are sent as given.
	Metadata map[string]string
	// IfMatch, when set, makes the write conditional on the object's
	// current ETag (unquoted).
	IfMatch string
	// IfNoneMatch makes the write conditional on the key having no object
	// (If-None-Match: *).
	IfNoneMatch bool
}

// GetOptions are the conditions of a Get.
type GetOptions struct {
	// IfMatch, when set, makes the read conditional on the object's ETag.
	IfMatch string
}

// ObjectInfo describes one version of an object.
type ObjectInfo struct {
	ETag string // without quotes
	Size int64
	// Metadata holds the user metadata, keys in lower case without the
	// x-amz-meta- prefix. Put returns none.
	Metadata map[string]string
}

// ErrNotFound is matched by errors about a missing object (NoSuchKey, 404).
var ErrNotFound = errors.New("s3client: no such key")

// ErrPreconditionFailed is matched by errors of a request whose If-Match or
// If-None-Match condition failed (412).
var ErrPreconditionFailed = errors.New("s3client: precondition failed")

// ErrConflict is matched by errors of a conditional write that raced another
// request on the same key (409 ConditionalRequestConflict, sent by AWS S3):
// the write did not happen and may be retried.
var ErrConflict = errors.New("s3client: conditional request conflict")

// Classify wraps err so that it matches ErrNotFound, ErrPreconditionFailed
// or ErrConflict as code (the S3 error code) and status (the HTTP status)
// say; other errors are returned unchanged. Adapters call it on every error.
func Classify(err error, code string, status int) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case code == "NoSuchKey" || code == "NotFound" || (code == "" && status == 404):
		kind = ErrNotFound
	case code == "PreconditionFailed" || status == 412:
		kind = ErrPreconditionFailed
	case code == "ConditionalRequestConflict" || status == 409:
		kind = ErrConflict
	default:
		return err
	}
	return &Error{Kind: kind, Err: err}
}

// Error is a classified SDK error: it matches Kind and unwraps to Err.
type Error struct {
	Kind error // ErrNotFound, ErrPreconditionFailed or ErrConflict
	Err  error // the SDK's error
}

// Error implements error.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns Kind and Err.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// MaxKeyLen is the longest object key S3 accepts, in bytes.
const MaxKeyLen = 1024

// CheckKey refuses keys that S3 or an SDK would refuse or alter: empty keys,
// keys of only white space (minio-go trims them to nothing), keys over
// MaxKeyLen bytes and keys that are not UTF-8. The error matches
// fence.ErrInvalidResource.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty object key", fence.ErrInvalidResource)
	case strings.TrimSpace(key) == "":
		return fmt.Errorf("%w: object key of only white space", fence.ErrInvalidResource)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: object key of %d bytes, limit %d", fence.ErrInvalidResource, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: object key is not UTF-8", fence.ErrInvalidResource)
	}
	return nil
}

// LowerKeys returns m with its keys in lower case (nil for an empty m).
func LowerKeys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToLower(k)] = v
	}
	return out
}
