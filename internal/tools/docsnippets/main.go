// Command docsnippets checks that every Go snippet in the repository's
// Markdown (README.md, CONTRIBUTING.md, docs/**/*.md) is an excerpt of Go code
// that the build compiles: each fenced ```go block, split at elision lines
// ("..." or "// ..."), must appear as a contiguous run of lines in some .go
// file of the repository (compared line by line with surrounding whitespace
// and blank lines ignored, and // comments dropped on both sides, so a
// snippet may annotate its lines). A snippet edited in the docs but not in the code,
// or code changed under a snippet, makes the check fail. Runs in make lint.
package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	bad, total, err := run(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docsnippets:", err)
		os.Exit(2)
	}
	for _, b := range bad {
		fmt.Println(b)
	}
	if len(bad) > 0 {
		fmt.Printf("docsnippets: %d of %d Go snippets are not excerpts of compiled code\n", len(bad), total)
		os.Exit(1)
	}
	fmt.Printf("docsnippets: %d Go snippets, all excerpts of compiled code\n", total)
}

// chunk is one elision-free part of a snippet.
type chunk struct {
	doc   string // file:line of the snippet
	lines []string
}

func run(root string) (bad []string, total int, err error) {
	docs, err := markdownFiles(root)
	if err != nil {
		return nil, 0, err
	}
	var snippets [][]chunk
	for _, d := range docs {
		s, err := extract(root, d)
		if err != nil {
			return nil, 0, err
		}
		snippets = append(snippets, s...)
	}
	corpus, err := goFiles(root)
	if err != nil {
		return nil, 0, err
	}
	for _, s := range snippets {
		total++
		for _, c := range s {
			if !found(c.lines, corpus) {
				bad = append(bad, fmt.Sprintf("%s: snippet part starting %q is not in any .go file", c.doc, c.lines[0]))
				break
			}
		}
	}
	return bad, total, nil
}

func markdownFiles(root string) ([]string, error) {
	var out []string
	for _, f := range []string{"README.md", "CONTRIBUTING.md"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			out = append(out, f)
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(f string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(f) != ".md" {
			return err
		}
		rel, _ := filepath.Rel(root, f)
		out = append(out, rel)
		return nil
	})
	return out, err
}

// extract returns the Go snippets of one Markdown file, each split into
// chunks at elision lines.
func extract(root, rel string) ([][]chunk, error) {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out   [][]chunk
		cur   []chunk
		in    bool
		n     int
		start int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	flush := func(lines *[]string) {
		if len(*lines) > 0 {
			cur = append(cur, chunk{doc: fmt.Sprintf("%s:%d", rel, start), lines: *lines})
			*lines = nil
		}
	}
	var lines []string
	for sc.Scan() {
		n++
		raw := sc.Text()
		t := strings.TrimSpace(raw)
		switch {
		case !in && (t == "```go" || strings.HasPrefix(t, "```go ")):
			in, start, cur, lines = true, n, nil, nil
		case in && t == "```":
			flush(&lines)
			if len(cur) > 0 {
				out = append(out, cur)
			}
			in = false
		case in && (t == "..." || t == "// ..." || t == "…"):
			flush(&lines)
		case in:
			if t = stripComment(t); t != "" {
				lines = append(lines, t)
			}
		}
	}
	return out, sc.Err()
}

// goFiles returns every .go file's non-blank lines, trimmed.
func goFiles(root string) ([][]string, error) {
	var out [][]string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".services", "out", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if t := stripComment(strings.TrimSpace(l)); t != "" {
				lines = append(lines, t)
			}
		}
		out = append(out, lines)
		return nil
	})
	return out, err
}

func found(want []string, corpus [][]string) bool {
	for _, file := range corpus {
		for i := 0; i+len(want) <= len(file); i++ {
			if file[i] != want[0] {
				continue
			}
			ok := true
			for j := 1; j < len(want); j++ {
				if file[i+j] != want[j] {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// stripComment drops a // comment from a trimmed line, ignoring // inside
// string and rune literals, and trims what is left.
func stripComment(l string) string {
	var quote byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '`' || c == '\'':
			quote = c
		case c == '/' && i+1 < len(l) && l[i+1] == '/':
			return strings.TrimSpace(l[:i])
		}
	}
	return l
}
