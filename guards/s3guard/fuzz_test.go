package s3guard

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// Fuzz targets for everything s3guard parses from outside: pointer bodies
// read from the bucket (anyone with write access to the bucket controls
// them), keys and put options from callers. Seed corpora live in
// testdata/fuzz/<target>/; `make fuzz` runs each target briefly.

const fuzzWriteID = "0123456789abcdef0123456789abcdef"

func fuzzPointerSeeds() [][]byte {
	key := "sessions/s1/report.txt"
	good := []*pointer{
		{Format: PointerFormat, Token: 7, WriteID: fuzzWriteID, Data: dataKey(DefaultDataPrefix, key, 7, fuzzWriteID),
			ETag: "d41d8cd98f00b204e9800998ecf8427e", Size: 3, ContentType: "text/plain", Metadata: map[string]string{"a": "b"}},
		{Format: PointerFormat, Token: 9, WriteID: fuzzWriteID, Deleted: true},
		{Format: PointerFormat, Token: 5, WriteID: fuzzWriteID, Inline: []byte("inline\x00"), Size: 7, ContentType: "text/plain"},
		{Format: PointerFormat, Token: 7, Run: "0b5f3c1e-8d2a-4f6b-9c7e-1a2b3c4d5e6f", WriteID: fuzzWriteID,
			Data: dataKey(DefaultDataPrefix, key, 7, fuzzWriteID), ETag: "d41d8cd98f00b204e9800998ecf8427e", Size: 3},
		{Format: PointerFormat, Token: 9, Run: "run-a", WriteID: fuzzWriteID, Deleted: true},
	}
	var out [][]byte
	for _, p := range good {
		b, err := p.encode()
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return append(out,
		[]byte(`{}`), []byte(`null`), []byte(`[]`), []byte(``),
		[]byte(`{"fencekit":"s3guard/v1","token":-1,"write_id":"x"}`),
		[]byte(`{"fencekit":"s3guard/v1","token":9223372036854775808,"write_id":"`+fuzzWriteID+`","deleted":true}`),
		[]byte(`{"fencekit":"s3guard/v1","token":1,"write_id":"`+fuzzWriteID+`","deleted":true} {}`),
		[]byte(`{"fencekit":"s3guard/v1","token":1,"write_id":"`+fuzzWriteID+`","deleted":true,"extra":1}`),
		[]byte(`{"fencekit":"s3guard/v1","token":"7","write_id":"`+fuzzWriteID+`","deleted":true}`),
		[]byte(`{"fencekit":"s3guard/v1","token":"7","run":"bad run","write_id":"`+fuzzWriteID+`","deleted":true}`),
		[]byte(`{"fencekit":"s3guard/v1","token":"7","run":"","write_id":"`+fuzzWriteID+`","deleted":true}`),
	)
}

// FuzzDecodePointer feeds arbitrary bodies to the pointer decoder: it never
// panics, every refusal is a *fence.ForeignError naming the key, and every accepted
// body describes a valid pointer that re-encodes to an equal one.
func FuzzDecodePointer(f *testing.F) {
	for _, b := range fuzzPointerSeeds() {
		f.Add(b, "sessions/s1/report.txt")
	}
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		if checkResource(DefaultDataPrefix, key) != nil {
			return // the decoder is only reached with valid keys
		}
		p, err := decodePointer(DefaultDataPrefix, key, body)
		if err != nil {
			var pe *fence.ForeignError
			if !errors.As(err, &pe) || !errors.Is(err, fence.ErrForeign) {
				t.Fatalf("refusal is not a *fence.ForeignError: %T %v", err, err)
			}
			if pe.Resource != key {
				t.Fatalf("fence.ForeignError.Resource %q, want %q", pe.Resource, key)
			}
			return
		}
		if p.Format != PointerFormat || !p.Token.Valid() || fence.ValidateRun(p.Run) != nil || !isWriteID(p.WriteID) || p.Size < 0 {
			t.Fatalf("accepted an invalid pointer: %+v", p)
		}
		if p.inline() && (int64(len(p.Inline)) != p.Size || p.Size > MaxInline || p.ETag != "") {
			t.Fatalf("accepted an invalid inline pointer: %+v", p)
		}
		if !p.Deleted && !p.inline() {
			tok, _, ok := parseDataKey(DefaultDataPrefix, key, p.Data)
			if !ok || tok > p.Token {
				t.Fatalf("accepted pointer with bad data key %q (token %d)", p.Data, p.Token)
			}
		}
		again, err := p.encode()
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		q, err := decodePointer(DefaultDataPrefix, key, again)
		if err != nil {
			t.Fatalf("re-encoded pointer refused: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normalise(p), normalise(q)) {
			t.Fatalf("round trip changed the pointer:\n%+v\n%+v", p, q)
		}
		if _, err := decodePointer(DefaultDataPrefix+"other/", key, body); err == nil && !p.Deleted && !p.inline() {
			t.Fatalf("content pointer accepted under a different data prefix")
		}
	})
}

func normalise(p *pointer) pointer {
	c := *p
	if len(c.Metadata) == 0 {
		c.Metadata = nil
	}
	if len(c.Inline) == 0 {
		c.Inline = nil
	}
	return c
}

// FuzzCheckKey checks that every key the guard accepts obeys the documented
// rules and yields a data key that parses back, and that every refusal is a
// *fence.ResourceError matching fence.ErrInvalidResource.
func FuzzCheckKey(f *testing.F) {
	for _, k := range []string{
		"a", "sessions/s1/report.txt", "/a", "a/", "a//b", "a/./b", "a/../b", "..", `a\b`, "a\x00b", "a\nb",
		"_fencekit/data/x", "ü/ñ", strings.Repeat("x", 255), strings.Repeat("x", 256), strings.Repeat("a/", 256) + "a",
		"\xff", "a\x7f", " ", "   ", "\u00a0", "a/ /b",
	} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := checkResource(DefaultDataPrefix, key)
		if err != nil {
			var ke *fence.ResourceError
			if !errors.As(err, &ke) || !errors.Is(err, fence.ErrInvalidResource) {
				t.Fatalf("refusal %T %v is not a *fence.ResourceError matching fence.ErrInvalidResource", err, err)
			}
			if ke.Resource != key {
				t.Fatalf("fence.ResourceError.Resource is %q, want the key %q", ke.Resource, key)
			}
			if len(key) > 64 && strings.Contains(err.Error(), strconv.Quote(key)) {
				t.Fatalf("message carries the whole %d-byte key: %v", len(key), err)
			}
			return
		}
		if fence.ValidateResource(key) != nil || len(key) > fence.MaxResourceLen {
			t.Fatalf("accepted %q that fence.ValidateResource refuses", key)
		}
		if strings.TrimSpace(key) == "" || strings.HasPrefix(key, DefaultDataPrefix) || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") ||
			strings.Contains(key, "//") || strings.Contains(key, `\`) {
			t.Fatalf("accepted %q", key)
		}
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "." || seg == ".." || len(seg) > MaxSegmentLen {
				t.Fatalf("accepted %q with segment %q", key, seg)
			}
		}
		dk := dataKey(DefaultDataPrefix, key, 42, fuzzWriteID)
		if len(dk) > maxS3KeyLen {
			t.Fatalf("data key of %q is %d bytes", key, len(dk))
		}
		tok, id, ok := parseDataKey(DefaultDataPrefix, key, dk)
		if !ok || tok != 42 || id != fuzzWriteID {
			t.Fatalf("data key %q does not parse back: %v %d %q", dk, ok, tok, id)
		}
	})
}

// FuzzPutOptions checks that options checkOptions accepts always produce a
// pointer the decoder accepts (a writer can never store a pointer its own
// readers refuse), and that refusals match ErrInvalidOptions.
func FuzzPutOptions(f *testing.F) {
	f.Add("text/plain", "owner", "desktop")
	f.Add("", "", "")
	f.Add("text/plain\r\nX-Evil: 1", "a", "b")
	f.Add("x", "bad key", "v")
	f.Add("x", "k", "line\nbreak")
	f.Add("x", "k", "\xff")
	f.Add("ü", "k", "ü")
	f.Fuzz(func(t *testing.T, contentType, mk, mv string) {
		opts := PutOptions{ContentType: contentType}
		if mk != "" {
			opts.Metadata = map[string]string{mk: mv}
		}
		if err := checkOptions(opts); err != nil {
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("refusal %v does not match ErrInvalidOptions", err)
			}
			return
		}
		key := "k/obj"
		p := &pointer{Format: PointerFormat, Token: 3, WriteID: fuzzWriteID, Data: dataKey(DefaultDataPrefix, key, 3, fuzzWriteID),
			ETag: "etag", Size: 1, ContentType: contentType, Metadata: opts.Metadata}
		body, err := p.encode()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		q, err := decodePointer(DefaultDataPrefix, key, body)
		if err != nil {
			t.Fatalf("accepted options give a pointer the decoder refuses: %v", err)
		}
		if q.ContentType != contentType || !reflect.DeepEqual(normalise(q).Metadata, normalise(p).Metadata) {
			t.Fatalf("options changed in the round trip: %+v vs %+v", q, p)
		}
	})
}
