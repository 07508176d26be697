package traceoutcome_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/lease/internal/traceoutcome"
)

func TestBareWords(t *testing.T) {
	for _, v := range []string{traceoutcome.OutcomeGranted, traceoutcome.OutcomeHeld, traceoutcome.OutcomeError, traceoutcome.OutcomeFnError} {
		if v == "" || strings.Contains(v, ".") {
			t.Errorf("outcome %q is not a bare word", v)
		}
	}
}

// TestDocumented: docs/operations.md ("Tracing") names every outcome, in
// backquotes, since the docs are where users find them.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "traceoutcome.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				v, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				n++
				if !strings.Contains(string(doc), "`"+v+"`") {
					t.Errorf("docs/operations.md does not name outcome `%s` (%s)", v, name.Name)
				}
			}
		}
	}
	if n != 18 {
		t.Errorf("%d outcomes, want 18 (update this test and docs/operations.md together)", n)
	}
}
