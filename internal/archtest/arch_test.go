package archtest

import (
	"bufio"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/fencekit/fencekit"

// rule is one row of docs/architecture.md's import table.
type rule struct {
	pattern  string
	allowed  []string // patterns; nil with any == false means none
	anything bool
}

// match reports whether pkg matches pattern and returns the pattern's root
// (the part before "/...", with "*" filled in from pkg).
func match(pattern, pkg string) (root string, ok bool) {
	pp := strings.Split(strings.TrimSuffix(pattern, "/..."), "/")
	kp := strings.Split(pkg, "/")
	recursive := strings.HasSuffix(pattern, "/...")
	if len(kp) < len(pp) || (!recursive && len(kp) != len(pp)) {
		return "", false
	}
	for i, p := range pp {
		if p != "*" && p != kp[i] {
			return "", false
		}
	}
	return strings.Join(kp[:len(pp)], "/"), true
}

func within(root, pkg string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }

// readRules parses the "| package | may import |" table.
func readRules(file string) ([]rule, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rules []rule
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "| package | may import |":
			in = true
			continue
		case !in:
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 2 {
			return nil, fmt.Errorf("%s: row %q: want two cells", file, line)
		}
		r := rule{pattern: strings.Trim(strings.TrimSpace(cells[0]), "`")}
		switch imp := strings.TrimSpace(cells[1]); imp {
		case "—":
		case "anything":
			r.anything = true
		default:
			for _, a := range strings.Split(imp, ",") {
				r.allowed = append(r.allowed, strings.Trim(strings.TrimSpace(a), "`"))
			}
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("%s: no import table found", file)
	}
	return rules, sc.Err()
}

// imports returns, per package directory (relative to top), the fencekit
// packages its non-test files import.
func imports(top string) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != top && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "testdata" || name == "node_modules" || name == "out" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			if strings.Contains(cg.Text(), "go:build ignore") {
				return nil
			}
		}
		rel, _ := filepath.Rel(top, filepath.Dir(p))
		pkg := filepath.ToSlash(rel)
		if out[pkg] == nil {
			out[pkg] = map[string]bool{}
		}
		for _, is := range f.Imports {
			ip, _ := strconv.Unquote(is.Path.Value)
			if ip == modulePath || strings.HasPrefix(ip, modulePath+"/") {
				out[pkg][strings.TrimPrefix(strings.TrimPrefix(ip, modulePath), "/")] = true
			}
		}
		return nil
	})
	return out, err
}

// violations applies rules to every package's imports.
func violations(rules []rule, pkgs map[string]map[string]bool) []string {
	var bad []string
	for pkg, imps := range pkgs {
		var r *rule
		var root string
		for i := range rules {
			if rt, ok := match(rules[i].pattern, pkg); ok {
				r, root = &rules[i], rt
				break
			}
		}
		if r == nil {
			bad = append(bad, fmt.Sprintf("%s: no row of docs/architecture.md's import table matches it", pkg))
			continue
		}
		if r.anything {
			continue
		}
	next:
		for imp := range imps {
			if within(root, imp) {
				continue
			}
			for _, a := range r.allowed {
				if _, ok := match(a, imp); ok {
					continue next
				}
			}
			bad = append(bad, fmt.Sprintf("%s imports %s: its row (%s) does not allow it", pkg, imp, r.pattern))
		}
	}
	sort.Strings(bad)
	return bad
}

func repoTop(t *testing.T) string {
	t.Helper()
	top, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(top, "docs", "architecture.md")); err != nil {
		t.Fatal(err)
	}
	return top
}

// TestImportsFollowTheArchitectureMap checks the import direction of every
// package, nested modules included, against docs/architecture.md.
func TestImportsFollowTheArchitectureMap(t *testing.T) {
	top := repoTop(t)
	rules, err := readRules(filepath.Join(top, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := imports(top)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"fence", "lease", "guards/pgguard", "guards/redisguard"} {
		if _, ok := pkgs[pkg]; !ok {
			t.Fatalf("the walk found no package %s: it does not see the tree", pkg)
		}
	}
	for _, v := range violations(rules, pkgs) {
		t.Error(v)
	}
}

// TestCheckerCatchesUpwardImports feeds the checker imports that break the
// rule, so the test above cannot pass by checking nothing.
func TestCheckerCatchesUpwardImports(t *testing.T) {
	top := repoTop(t)
	rules, err := readRules(filepath.Join(top, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pkg, imp string
		ok       bool
	}{
		{"fence", "lease", false},
		{"guards/redisguard", "lease", false},
		{"guards/redisguard", "guards/s3guard", false},
		{"guards/redisguard", "internal/netproxy", false},
		{"guards/pgguard", "sql/migrations", true},
		{"guards/s3guard/awsclient", "guards/s3guard/s3client", true},
		{"lease", "guards/pgguard", false},
		{"lease/leaseops", "lease/internal/floorcheck", true},
		{"sql/migrations", "fence", false},
		{"cmd/fencekit/internal/cli", "guards/pgguard", true},
		{"brandnew", "fence", false},
	} {
		got := violations(rules, map[string]map[string]bool{tc.pkg: {tc.imp: true}})
		if (len(got) == 0) != tc.ok {
			t.Errorf("%s importing %s: violations %q, want allowed=%v", tc.pkg, tc.imp, got, tc.ok)
		}
	}
	if _, err := readRules(filepath.Join(t.TempDir(), "none.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readRules of a missing file: %v", err)
	}

}
