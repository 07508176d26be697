package s3guard

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
)

func TestPointerRoundTrip(t *testing.T) {
	id := newWriteID()
	for name, p := range map[string]*pointer{
		"data": {Format: PointerFormat, Token: 9, WriteID: id, Data: dataKey(DefaultDataPrefix, "k", 9, id), ETag: "e1",
			Size: 3, ContentType: "text/plain", Metadata: map[string]string{"owner": "<run & b>"}},
		"restamped": {Format: PointerFormat, Token: 12, WriteID: id, Data: dataKey(DefaultDataPrefix, "k", 9, newWriteID()), ETag: "e1", Size: 3},
		"tombstone": {Format: PointerFormat, Token: 4, WriteID: id, Deleted: true},
		"run":       {Format: PointerFormat, Token: 9, Run: "0b5f3c1e-8d2a-4f6b-9c7e-1a2b3c4d5e6f", WriteID: id, Data: dataKey(DefaultDataPrefix, "k", 9, id), ETag: "e1", Size: 3},
		"run-tomb":  {Format: PointerFormat, Token: 4, Run: "run-a", WriteID: id, Deleted: true},
		"inline":    {Format: PointerFormat, Token: 1, WriteID: id, Inline: []byte("hi\x00"), Size: 3},
		"empty":     {Format: PointerFormat, Token: 1, WriteID: id},
	} {
		b, err := p.encode()
		require.NoError(t, err, name)
		assert.NotContains(t, string(b), `\u003c`, "%s: no HTML escaping", name)
		got, err := decodePointer(DefaultDataPrefix, "k", b)
		require.NoError(t, err, name)
		if len(p.Inline) == 0 {
			p.Inline = nil
		}
		assert.Equal(t, p, got, name)
		// The same body under another key is not a pointer of that key
		// (unless it names no data object).
		if p.Data != "" {
			_, err = decodePointer(DefaultDataPrefix, "other", b)
			assert.ErrorIs(t, err, fence.ErrForeign, name)
		}
	}
	// Two writes of identical content have different pointer bodies.
	a, _ := (&pointer{Format: PointerFormat, Token: 1, WriteID: newWriteID(), Inline: []byte("x"), Size: 1}).encode()
	b, _ := (&pointer{Format: PointerFormat, Token: 1, WriteID: newWriteID(), Inline: []byte("x"), Size: 1}).encode()
	assert.NotEqual(t, a, b)
}

// TestPointerRun: pointers written before run identities existed (no "run"
// field) decode with an empty Run (the token-only rule applies to them); a
// malformed run makes the object "not a pointer".
func TestPointerRun(t *testing.T) {
	id := newWriteID()
	old := `{"fencekit":"s3guard/v1","token":"7","write_id":"` + id + `","deleted":false,"inline":"eA==","size":1}`
	p, err := decodePointer(DefaultDataPrefix, "k", []byte(old))
	require.NoError(t, err)
	assert.Equal(t, "", p.Run)
	assert.Equal(t, fence.Token(7), p.Token)
	withRun := strings.Replace(old, `"write_id"`, `"run":"run-a","write_id"`, 1)
	p, err = decodePointer(DefaultDataPrefix, "k", []byte(withRun))
	require.NoError(t, err)
	assert.Equal(t, "run-a", p.Run)
	for _, bad := range []string{`"run a"`, `"` + strings.Repeat("r", fence.MaxRunLen+1) + `"`, `"r\u0000"`, `7`} {
		_, err = decodePointer(DefaultDataPrefix, "k", []byte(strings.Replace(old, `"write_id"`, `"run":`+bad+`,"write_id"`, 1)))
		assert.ErrorIs(t, err, fence.ErrForeign, bad)
	}
}
