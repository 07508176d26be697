package effectsobs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// consts returns the string constants of effectsobs.go, by name.
func consts(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "effectsobs.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[n.Name] = v
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no string constants")
	}
	return out
}

// TestDocumented: docs/operations.md names every instrument as
// "`value` (`Name`)" exactly once, and every span name; every
// fencekit.effects.* name it mentions is a constant of this package.
func TestDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	cs := consts(t)
	values := map[string]bool{}
	instruments := 0
	for name, v := range cs {
		values[v] = true
		switch {
		case strings.HasPrefix(name, "Span"):
			if !strings.Contains(doc, "| `"+v+"` |") {
				t.Errorf("docs/operations.md has no span row for %s (%s)", v, name)
			}
		case strings.HasPrefix(v, "fencekit.effects.") && !strings.HasPrefix(name, "Attr"):
			instruments++
			if n := strings.Count(doc, "`"+v+"` (`"+name+"`)"); n != 1 {
				t.Errorf("docs/operations.md names `%s` (`%s`) %d times, want once", v, name, n)
			}
		}
	}
	if instruments != 9 {
		t.Errorf("%d instruments, want 9 (update this test and docs/operations.md together)", instruments)
	}
	for _, m := range regexp.MustCompile(`fencekit\.effects\.[a-z_.]*[a-z_]`).FindAllString(doc, -1) {
		if !values[m] {
			t.Errorf("docs/operations.md names %s, which is no constant of package effectsobs", m)
		}
	}
	// Span attributes are written as fencekit.effects.<name> or .<name>
	// in the span table: each key must appear.
	for name, v := range cs {
		if strings.HasPrefix(name, "Attr") && strings.HasPrefix(v, "fencekit.effects.") {
			short := "." + strings.TrimPrefix(v, "fencekit.effects.")
			if !strings.Contains(doc, "`"+v+"`") && !strings.Contains(doc, "`"+short+"`") {
				t.Errorf("docs/operations.md does not name span attribute %s (%s)", v, name)
			}
		}
	}
}
