package leasemetrics_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/guards/guardobs"
)

// consts returns the string constants declared in the non-test Go files of
// dir, by name.
func consts(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				addConsts(t, g, out)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no string constants in %s", dir)
	}
	return out
}

// addConsts adds the string constants of one const declaration to out.
func addConsts(t *testing.T, g *ast.GenDecl, out map[string]string) {
	t.Helper()
	for _, spec := range g.Specs {
		vs := spec.(*ast.ValueSpec)
		for i, n := range vs.Names {
			if i >= len(vs.Values) {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			out[n.Name] = v
		}
	}
}

// TestDocumented: docs/operations.md names every constant of this package
// exactly once, as "`value` (`Name`)", and every fencekit.lease.* name it
// mentions is one of them or a span name or attribute key of package
// leasetrace or leaseops (their Span* and Attr* constants).
func TestDocumented(t *testing.T) {
	b, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	cs := consts(t, ".")
	values := map[string]bool{}
	for name, v := range cs {
		values[v] = true
		if n := strings.Count(doc, "`"+v+"` (`"+name+"`)"); n != 1 {
			t.Errorf("docs/operations.md names `%s` (`%s`) %d times, want once", v, name, n)
		}
	}
	spans := map[string]bool{}
	for _, dir := range []string{"../../leasetrace", "../../leaseops"} {
		for _, v := range consts(t, dir) {
			spans[v] = true
		}
	}
	for _, m := range regexp.MustCompile(`fencekit\.lease\.[a-z_.]*[a-z_]`).FindAllString(doc, -1) {
		if !values[m] && !spans[m] {
			t.Errorf("docs/operations.md names %s, which is no constant of package leasemetrics (nor a span or attribute of leasetrace or leaseops)", m)
		}
	}
}

// TestNamespaces: every lease instrument is named fencekit.lease.*, every
// guard instrument fencekit.guard.*, so a dashboard can select either.
func TestNamespaces(t *testing.T) {
	n := 0
	for name, v := range consts(t, ".") {
		if strings.HasPrefix(v, "fencekit.") {
			n++
			if !strings.HasPrefix(v, "fencekit.lease.") {
				t.Errorf("lease instrument %s = %q is not named fencekit.lease.*", name, v)
			}
		}
	}
	if n != 16 {
		t.Errorf("%d lease instruments, want 16 (update this test and docs/operations.md together)", n)
	}
	g := 0
	for name, v := range consts(t, "../../../guards/guardobs") {
		if strings.HasPrefix(name, "Metric") || strings.HasPrefix(v, "fencekit.") {
			g++
			if !strings.HasPrefix(v, "fencekit.guard.") {
				t.Errorf("guard instrument guardobs.%s = %q is not named fencekit.guard.*", name, v)
			}
		}
	}
	if g == 0 {
		t.Error("found no guard instrument in guards/guardobs")
	}
	if r := guardobs.RetriesName("kv"); !strings.HasPrefix(r, "fencekit.guard.") {
		t.Errorf("guardobs.RetriesName = %q", r)
	}
}
