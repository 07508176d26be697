package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
}

func TestSnippets(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "x/example_test.go", `package x

func Example() {
	url := "http://example.com" // not a comment start inside the string
	if err := do(url); err != nil {
		panic(err)
	}
	done()
}
`)
	write(t, dir, "README.md", "# x\n\n```go\n// annotated\nurl := \"http://example.com\"\nif err := do(url); err != nil { // why\n...\ndone()\n```\n")
	write(t, dir, "docs/a.md", "```go\nurl := \"http://example.com\"\n\n   done()\n```\n\n```sh\nnot go\n```\n")
	bad, total, err := run(dir)
	require.NoError(t, err)
	assert.Equal(t, 2, total)
	assert.Len(t, bad, 1, "docs/a.md skips lines of the code: not an excerpt")
	assert.Contains(t, bad[0], "docs/a.md:1")

	write(t, dir, "docs/a.md", "```go\nurl := \"http://example.com\"\n...\n   done()\n```\n")
	bad, total, err = run(dir)
	require.NoError(t, err)
	assert.Equal(t, 2, total)
	assert.Empty(t, bad, "an elision line splits the snippet into parts")
}

func TestStripComment(t *testing.T) {
	assert.Equal(t, "a := 1", stripComment("a := 1 // one"))
	assert.Equal(t, "", stripComment("// whole line"))
	assert.Equal(t, `u := "http://x"`, stripComment(`u := "http://x" // c`))
	assert.Equal(t, "r := '/'", stripComment("r := '/' // c"))
	assert.Equal(t, "s := `a//b`", stripComment("s := `a//b`"))
	assert.Equal(t, `e := "\"//"`, stripComment(`e := "\"//" // c`))
}
