package s3guard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPointerRoundTrip(t *testing.T) {
	id := newWriteID()
	for name, p := range map[string]*pointer{
		"data": {Format: PointerFormat, Token: 9, WriteID: id, Data: dataKey(DefaultDataPrefix, "k", 9, id), ETag: "e1",
			Size: 3, ContentType: "text/plain", Metadata: map[string]string{"owner": "<run & b>"}},
		"restamped": {Format: PointerFormat, Token: 12, WriteID: id, Data: dataKey(DefaultDataPrefix, "k", 9, newWriteID()), ETag: "e1", Size: 3},
		"tombstone": {Format: PointerFormat, Token: 4, WriteID: id, Deleted: true},
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
			assert.ErrorIs(t, err, ErrNotPointer, name)
		}
	}
	// Two writes of identical content have different pointer bodies.
	a, _ := (&pointer{Format: PointerFormat, Token: 1, WriteID: newWriteID(), Inline: []byte("x"), Size: 1}).encode()
	b, _ := (&pointer{Format: PointerFormat, Token: 1, WriteID: newWriteID(), Inline: []byte("x"), Size: 1}).encode()
	assert.NotEqual(t, a, b)
}
