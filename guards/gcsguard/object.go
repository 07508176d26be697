package gcsguard

import (
	"fmt"
	"maps"
	"strings"
	"unicode"
	"unicode/utf8"

	"cloud.google.com/go/storage"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

// Metadata keys gcsguard stores on every object it writes. User metadata
// keys starting with MetadataPrefix are refused.
const (
	MetadataPrefix  = "fencekit-"
	MetaToken       = "fencekit-token"    // decimal fencing token, the resource's mark
	MetaRun         = "fencekit-run"      // run identity of the write (may be absent)
	MetaWriteID     = "fencekit-write-id" // 32 hex digits, fresh for every write
	MetaDeleted     = "fencekit-deleted"  // "true" on a tombstone
	tombstoneMarker = "true"
)

// Limits on PutOptions.
const (
	// MaxMetadataSize bounds the user metadata of one object: the sum of
	// key and value lengths. GCS allows 8 KiB in total; the rest is left
	// for gcsguard's own keys.
	MaxMetadataSize = 4096
	maxMetaKeyLen   = 128
	maxTypeLen      = 256
	writeIDLen      = objstage.WriteIDLen
)

// state is one read of a key: attrs is nil when the key has no object.
type state struct {
	gen     int64
	token   fence.Token
	run     string
	writeID string
	deleted bool
	attrs   *storage.ObjectAttrs
}

func (st state) exists() bool { return st.attrs != nil }

// decode reads gcsguard's metadata from attrs. Anything that is not exactly
// what gcsguard writes is an *fence.ForeignError.
func decode(key string, a *storage.ObjectAttrs) (state, error) {
	bad := func(format string, args ...any) (state, error) {
		return state{}, &fence.ForeignError{Source: "gcsguard", Resource: key, Version: a.Generation, Reason: fmt.Sprintf(format, args...)}
	}
	raw, ok := a.Metadata[MetaToken]
	if !ok {
		return bad("no %s metadata", MetaToken)
	}
	tok, err := fence.Parse(raw)
	if err != nil {
		return bad("%s: %v", MetaToken, err)
	}
	run := a.Metadata[MetaRun]
	if _, ok := a.Metadata[MetaRun]; ok && run == "" {
		return bad("empty %s metadata", MetaRun)
	}
	if err := fence.ValidateRun(run); err != nil {
		return bad("%s: %v", MetaRun, err)
	}
	id := a.Metadata[MetaWriteID]
	if !objstage.IsWriteID(id) {
		return bad("%s %q is not %d hex digits", MetaWriteID, truncate(id), writeIDLen)
	}
	deleted := false
	if d, ok := a.Metadata[MetaDeleted]; ok {
		if d != tombstoneMarker {
			return bad("%s %q is not %q", MetaDeleted, truncate(d), tombstoneMarker)
		}
		deleted = true
	}
	return state{gen: a.Generation, token: tok, run: run, writeID: id, deleted: deleted, attrs: a}, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// checkResource applies fence.ValidateResource and GCS's own object name rules.
func checkResource(key string) error {
	if err := fence.ValidateResource(key); err != nil {
		return err
	}
	switch {
	case key == "." || key == "..":
		return &fence.ResourceError{Resource: key, Reason: `"." and ".." are not object names in GCS`}
	case strings.HasPrefix(key, ".well-known/acme-challenge/"):
		return &fence.ResourceError{Resource: key, Reason: "names under .well-known/acme-challenge/ are reserved by GCS"}
	case strings.TrimFunc(key, unicode.IsSpace) == "":
		return &fence.ResourceError{Resource: key, Reason: "only white space"}
	}
	return nil
}

// PutOptions describe the object a write stores.
type PutOptions struct {
	// ContentType is the object's Content-Type. At most 256 printable
	// ASCII bytes. Empty lets GCS choose.
	ContentType string
	// CacheControl is the object's Cache-Control. At most 256 printable
	// ASCII bytes.
	CacheControl string
	// Metadata is stored as the object's custom metadata next to
	// gcsguard's keys. Keys: 1..128 bytes of [A-Za-z0-9-_], not starting
	// with MetadataPrefix (any case); values: valid UTF-8 without control
	// characters; MaxMetadataSize bytes in total.
	Metadata map[string]string
}

func checkOptions(o PutOptions) error {
	for name, v := range map[string]string{"ContentType": o.ContentType, "CacheControl": o.CacheControl} {
		if len(v) > maxTypeLen {
			return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalidOptions, name, maxTypeLen)
		}
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return fmt.Errorf("%w: %s has byte %#x at %d", ErrInvalidOptions, name, v[i], i)
			}
		}
	}
	total := 0
	for k, v := range o.Metadata {
		if k == "" || len(k) > maxMetaKeyLen {
			return fmt.Errorf("%w: metadata key %q: want 1..%d bytes", ErrInvalidOptions, truncate(k), maxMetaKeyLen)
		}
		for i := 0; i < len(k); i++ {
			c := k[i]
			if !metaKeyByte(c) {
				return fmt.Errorf("%w: metadata key %q has byte %#x", ErrInvalidOptions, truncate(k), c)
			}
		}
		if strings.HasPrefix(strings.ToLower(k), MetadataPrefix) {
			return fmt.Errorf("%w: metadata key %q: the prefix %q is gcsguard's", ErrInvalidOptions, k, MetadataPrefix)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: metadata %q: value is not valid UTF-8", ErrInvalidOptions, k)
		}
		for _, r := range v {
			if r < 0x20 || r == 0x7f {
				return fmt.Errorf("%w: metadata %q: value contains control character %U", ErrInvalidOptions, k, r)
			}
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataSize {
		return fmt.Errorf("%w: metadata is %d bytes, limit %d", ErrInvalidOptions, total, MaxMetadataSize)
	}
	return nil
}

// Info describes the object of a resource as gcsguard's metadata records
// it.
type Info struct {
	Resource string
	// Generation is the GCS generation of the object; it changes on every
	// write.
	Generation int64
	// Token is the resource's high-water mark: the token of the accepted write
	// that stored the object. Run is that write's run identity (empty when
	// it presented none).
	Token fence.Token
	Run   string
	// WriteID identifies that write (32 hex digits, unique).
	WriteID string
	// Deleted is true for a tombstone.
	Deleted bool
	// Size, ContentType, CacheControl and Metadata describe the object;
	// Metadata holds the user's keys only.
	Size         int64
	ContentType  string
	CacheControl string
	Metadata     map[string]string
}

func (st state) info(key string) Info {
	in := Info{Resource: key, Generation: st.gen, Token: st.token, Run: st.run, WriteID: st.writeID, Deleted: st.deleted}
	if a := st.attrs; a != nil {
		in.Size, in.ContentType, in.CacheControl = a.Size, a.ContentType, a.CacheControl
		in.Metadata = userMetadata(a.Metadata)
	}
	return in
}

func userMetadata(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if strings.HasPrefix(strings.ToLower(k), MetadataPrefix) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// objectMetadata is the full metadata of a new object: the user's keys and
// gcsguard's.
func objectMetadata(user map[string]string, token fence.Token, run, writeID string, deleted bool) map[string]string {
	m := make(map[string]string, len(user)+4)
	maps.Copy(m, user)
	m[MetaToken] = token.String()
	m[MetaWriteID] = writeID
	if run != "" {
		m[MetaRun] = run
	}
	if deleted {
		m[MetaDeleted] = tombstoneMarker
	}
	return m
}

// metaKeyByte reports whether c may appear in a user metadata key.
func metaKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
