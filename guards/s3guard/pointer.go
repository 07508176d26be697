package s3guard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

// PointerFormat is the value of the "fencekit" field of every pointer body.
// Decoding refuses any other value.
const PointerFormat = "s3guard/v1"

// PointerContentType is the Content-Type of pointer objects.
const PointerContentType = "application/json"

// MaxPointerSize bounds the body of a pointer object. A larger object at a
// resource's key is reported as *fence.ForeignError.
const MaxPointerSize = 32 << 10

// MaxInline bounds Config.InlineMax: content stored inside the pointer body.
const MaxInline = 8 << 10

// MaxSegmentLen bounds each '/'-separated segment of a resource, in bytes.
// MinIO refuses longer segments ("unsupported characters"). A resource
// itself is at most fence.MaxResourceLen bytes; its data objects' keys add
// the data prefix and a 53-byte suffix, within S3's 1024-byte key limit.
const MaxSegmentLen = 255

// MaxMetadataSize bounds the total size of PutOptions.Metadata keys and
// values, like S3's own limit on user metadata.
const MaxMetadataSize = 2048

const (
	writeIDLen  = objstage.WriteIDLen // hex characters (128 random bits)
	tokenDigits = fence.MaxTokenLen
	// dataSuffixLen is len("/" + 19 digits + "-" + 32 hex).
	dataSuffixLen = 1 + tokenDigits + 1 + writeIDLen
	maxS3KeyLen   = 1024
)

// pointer is the JSON body stored at the user's key. Every accepted write
// stores a new pointer with a fresh write id, so the pointer's ETag changes on
// every accepted write even when the content bytes do not.
type pointer struct {
	Format      string            `json:"fencekit"`
	Token       fence.Token       `json:"token"`
	Run         string            `json:"run,omitempty"`
	WriteID     string            `json:"write_id"`
	Deleted     bool              `json:"deleted"`
	Data        string            `json:"data,omitempty"`
	Inline      []byte            `json:"inline,omitempty"`
	ETag        string            `json:"etag,omitempty"`
	Size        int64             `json:"size"`
	ContentType string            `json:"content_type,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

func (p *pointer) encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// inline reports whether p holds its content in its own body.
func (p *pointer) inline() bool { return !p.Deleted && p.Data == "" }

// decodePointer parses and checks a pointer body read from key. Anything that
// is not exactly what encode produces for key is a *fence.ForeignError.
func decodePointer(dataPrefix, key string, body []byte) (*pointer, error) {
	bad := func(format string, args ...any) error {
		return &fence.ForeignError{Source: "s3guard", Resource: key, Reason: fmt.Sprintf(format, args...)}
	}
	if len(body) > MaxPointerSize {
		return nil, bad("body larger than %d bytes", MaxPointerSize)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var p pointer
	if err := dec.Decode(&p); err != nil {
		return nil, bad("not a pointer body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("trailing data after the pointer body")
	}
	switch {
	case p.Format != PointerFormat:
		return nil, bad("format %q, want %q", truncate(p.Format), PointerFormat)
	case !p.Token.Valid():
		return nil, bad("missing or invalid token")
	case p.Run != "" && fence.ValidateRun(p.Run) != nil:
		return nil, bad("invalid run")
	case !isWriteID(p.WriteID):
		return nil, bad("invalid write_id")
	case p.Size < 0:
		return nil, bad("negative size")
	}
	if p.Deleted {
		if p.Data != "" || p.Inline != nil || p.ETag != "" || p.Size != 0 || p.ContentType != "" || len(p.Metadata) != 0 {
			return nil, bad("tombstone carries content fields")
		}
		return &p, nil
	}
	if p.Data == "" { // content inline
		switch {
		case p.ETag != "":
			return nil, bad("inline content with an etag")
		case int64(len(p.Inline)) != p.Size || p.Size > MaxInline:
			return nil, bad("inline content of %d bytes, size %d", len(p.Inline), p.Size)
		}
	} else if err := checkDataRef(dataPrefix, key, &p); err != nil {
		return nil, bad("%v", err)
	}
	if err := checkOptions(PutOptions{ContentType: p.ContentType, Metadata: p.Metadata}); err != nil {
		return nil, bad("%v", err)
	}
	return &p, nil
}

func checkDataRef(dataPrefix, key string, p *pointer) error {
	tok, _, ok := parseDataKey(dataPrefix, key, p.Data)
	switch {
	case !ok:
		return fmt.Errorf("data key %q is not under %q", truncate(p.Data), dataPrefix+key+"/")
	case tok > p.Token:
		return fmt.Errorf("data key token %d above pointer token %d", tok, p.Token)
	case p.ETag == "" || len(p.ETag) > 128 || strings.ContainsAny(p.ETag, "\"\x00\r\n"):
		return errors.New("invalid etag")
	case p.Inline != nil:
		return errors.New("both a data key and inline content")
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// dataKey names the immutable data object of one write.
func dataKey(dataPrefix, key string, token fence.Token, writeID string) string {
	return fmt.Sprintf("%s%s/%0*d-%s", dataPrefix, key, tokenDigits, int64(token), writeID)
}

// parseDataKey reports whether dk is a data key of key under dataPrefix and
// returns its token and write id.
func parseDataKey(dataPrefix, key, dk string) (fence.Token, string, bool) {
	base := dataPrefix + key + "/"
	if !strings.HasPrefix(dk, base) {
		return 0, "", false
	}
	return parseDataLeaf(dk[len(base):])
}

// parseDataLeaf parses "<19 digits>-<32 hex>".
func parseDataLeaf(leaf string) (fence.Token, string, bool) {
	if len(leaf) != dataSuffixLen-1 || leaf[tokenDigits] != '-' {
		return 0, "", false
	}
	digits, id := leaf[:tokenDigits], leaf[tokenDigits+1:]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, "", false
		}
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || v <= 0 || !isWriteID(id) {
		return 0, "", false
	}
	return fence.Token(v), id, true
}

func isWriteID(s string) bool { return objstage.IsWriteID(s) }

// checkResource applies fence.ValidateResource and the rules S3 and MinIO put on
// object names (no key of only white space, as in s3client.CheckKey), and
// keeps keys out of the guard's data prefix.
func checkResource(dataPrefix, key string) error {
	if err := fence.ValidateResource(key); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(key) == "":
		// S3 SDKs trim object names (minio-go then fails with an untyped
		// "Object name cannot be empty"): the same rule as s3client.CheckKey.
		return resourceErr(key, "only white space")
	case strings.HasPrefix(key, dataPrefix):
		return resourceErr(key, "inside the guard's data prefix "+strconv.Quote(dataPrefix))
	case strings.HasPrefix(dataPrefix, key+"/"):
		return resourceErr(key, "a parent of the guard's data prefix "+strconv.Quote(dataPrefix))
	case strings.HasPrefix(key, "/"), strings.HasSuffix(key, "/"):
		return resourceErr(key, "leading or trailing '/'")
	case strings.Contains(key, "//"):
		return resourceErr(key, "empty path segment")
	case strings.ContainsRune(key, '\\'):
		return resourceErr(key, "backslash")
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "." || seg == ".." {
			return resourceErr(key, "'.' or '..' path segment")
		}
		if len(seg) > MaxSegmentLen {
			return resourceErr(key, fmt.Sprintf("path segment of %d bytes, limit %d", len(seg), MaxSegmentLen))
		}
	}
	return nil
}

// checkOptions validates PutOptions.
func checkOptions(o PutOptions) error {
	if len(o.ContentType) > 256 || !printable(o.ContentType) {
		return fmt.Errorf("%w: content type must be at most 256 printable ASCII bytes", ErrInvalidOptions)
	}
	total := 0
	for k, v := range o.Metadata {
		total += len(k) + len(v)
		if !metaKey(k) {
			return fmt.Errorf("%w: metadata key %q: want [A-Za-z0-9-_], 1..128 bytes", ErrInvalidOptions, truncate(k))
		}
		if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("%w: metadata value for %q: want UTF-8 without control characters", ErrInvalidOptions, k)
		}
	}
	if total > MaxMetadataSize {
		return fmt.Errorf("%w: metadata is %d bytes, limit %d", ErrInvalidOptions, total, MaxMetadataSize)
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func metaKey(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
