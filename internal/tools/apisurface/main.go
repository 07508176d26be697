// Command apisurface counts the exported API of Go packages: exported
// top-level names (functions, types, variables, constants) plus exported
// methods, in the non-test .go files of each directory given (its
// sub-directories are other packages and are not counted). With -v it lists
// them; with -max N it fails when a package has more than N.
//
//	go run ./internal/tools/apisurface -v lease
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "list the names")
	limit := flag.Int("max", 0, "fail when a package exports more than `N` names (0: no limit)")
	flag.Parse()
	status := 0
	for _, dir := range flag.Args() {
		names, err := exported(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apisurface:", err)
			os.Exit(2)
		}
		if *verbose {
			for _, n := range names {
				fmt.Println(n)
			}
		}
		fmt.Printf("%s: %d exported names\n", dir, len(names))
		if *limit > 0 && len(names) > *limit {
			fmt.Printf("%s: over the budget of %d\n", dir, *limit)
			status = 1
		}
	}
	os.Exit(status)
}

// exported returns the sorted exported names of the package in dir:
// "Name" for top-level names, "Type.Method" for methods.
func exported(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var names []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		names = append(names, fileNames(f)...)
	}
	sort.Strings(names)
	return names, nil
}

func fileNames(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				names = append(names, d.Name.Name)
				continue
			}
			if recv := receiver(d.Recv.List[0].Type); ast.IsExported(recv) {
				names = append(names, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						names = append(names, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	return names
}

// receiver is the type name of a method's receiver.
func receiver(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
