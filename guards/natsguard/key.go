package natsguard

import "strings"

// Key returns the KV key that holds resource: the resource with every byte
// other than ASCII letters, digits, '-', '_' and '/' written as '=' and two
// upper-case hex digits ('=' itself too, and '.', which separates subject
// tokens). The mapping is one to one, and its result is always a valid KV
// key. Read a resource with another client under this key.
func Key(resource string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(resource))
	for i := 0; i < len(resource); i++ {
		c := resource[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '/':
			b.WriteByte(c)
		default:
			b.WriteByte('=')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		}
	}
	return b.String()
}
