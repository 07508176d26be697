package release

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

const rootPath = "github.com/fencekit/fencekit"

// repoRoot is the top of the fencekit repository.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// repoFiles lists the files a release would contain: tracked files and
// untracked files that are not ignored, relative to the repository root.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			continue // deleted in the working tree
		}
		files = append(files, f)
	}
	return files
}

// published reports whether the nested module in dir is one users depend on
// (not an example, a test suite or an internal tool).
func published(dir string) bool {
	first := strings.SplitN(dir, "/", 2)[0]
	return first != "integration" && first != "examples" && first != "internal" &&
		!strings.Contains(dir, "/internal/")
}

type nested struct {
	dir  string // relative to the repository root
	file *modfile.File
}

// nestedModules parses every go.mod below the root.
func nestedModules(t *testing.T, root string, files []string) []nested {
	t.Helper()
	var mods []nested
	for _, f := range files {
		if path.Base(f) != "go.mod" || f == "go.mod" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		mods = append(mods, nested{dir: path.Dir(f), file: mf})
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].dir < mods[j].dir })
	return mods
}

// releaseVersion is the version of the root module that every published
// nested module requires; the test fails if they disagree.
func releaseVersion(t *testing.T, mods []nested) string {
	t.Helper()
	version := ""
	for _, m := range mods {
		if !published(m.dir) {
			continue
		}
		if want := rootPath + "/" + m.dir; m.file.Module.Mod.Path != want {
			t.Errorf("%s/go.mod declares module %q, want %q", m.dir, m.file.Module.Mod.Path, want)
		}
		got := ""
		for _, r := range m.file.Require {
			if r.Mod.Path == rootPath {
				got = r.Mod.Version
			}
		}
		switch {
		case got == "":
			t.Errorf("%s/go.mod does not require %s", m.dir, rootPath)
		case module.IsPseudoVersion(got) || got == "v0.0.0":
			t.Errorf("%s/go.mod requires %s %s: a published module must require a release version, "+
				"which users resolve without the replace directive", m.dir, rootPath, got)
		case version == "":
			version = got
		case version != got:
			t.Errorf("%s/go.mod requires %s %s, others %s: nested modules are released together", m.dir, rootPath, got, version)
		}
	}
	if version == "" {
		t.Fatal("no published nested module names a release version of the root module")
	}
	return version
}

// addToProxy writes module m (the files of dir, excluding nested modules) into
// a file-system module proxy at proxy, in the layout GOPROXY=file:// expects.
func addToProxy(t *testing.T, proxy, root, dir string, m module.Version, files []string, mods []nested) {
	t.Helper()
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	var zfiles []modzip.File
	for _, f := range files {
		rel := f
		if dir != "." {
			if !strings.HasPrefix(f, dir+"/") {
				continue
			}
			rel = strings.TrimPrefix(f, dir+"/")
		}
		inOther := false
		for _, n := range mods {
			if n.dir != dir && strings.HasPrefix(f, n.dir+"/") && (dir == "." || strings.HasPrefix(n.dir, dir+"/")) {
				inOther = true
				break
			}
		}
		if inOther {
			continue
		}
		zfiles = append(zfiles, diskFile{rel: rel, abs: filepath.Join(root, f)})
	}
	var buf bytes.Buffer
	if err := modzip.Create(&buf, m, zfiles); err != nil {
		t.Fatalf("zip %s@%s: %v", m.Path, m.Version, err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(m.Version+".zip", buf.Bytes())
	write(m.Version+".mod", gomod)
	write(m.Version+".info", []byte(`{"Version":"`+m.Version+`","Time":"2026-01-01T00:00:00Z"}`))
	write("list", []byte(m.Version+"\n"))
}

// diskFile is one file of the working tree, as modzip.Create reads it.
type diskFile struct{ rel, abs string }

func (f diskFile) Path() string                 { return f.rel }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

// TestVersionedModules checks the versioning scheme: published nested
// modules require the root at one release version, and CHANGELOG.md has a
// section for it.
func TestVersionedModules(t *testing.T) {
	root := repoRoot(t)
	mods := nestedModules(t, root, repoFiles(t, root))
	version := releaseVersion(t, mods)
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(changelog))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "## ") && strings.Contains(sc.Text(), version) {
			found = true
		}
	}
	if !found {
		t.Errorf("CHANGELOG.md has no section for %s", version)
	}
}

// TestOutsideModule builds a fresh module outside the repository that
// requires guards/gcsguard by version through a module proxy, the way a user
// does: no replace directive, no go.work.
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module from a proxy; not a unit test")
	}
	root := repoRoot(t)
	files := repoFiles(t, root)
	mods := nestedModules(t, root, files)
	version := releaseVersion(t, mods)

	proxy := t.TempDir()
	addToProxy(t, proxy, root, ".", module.Version{Path: rootPath, Version: version}, files, mods)
	for _, m := range mods {
		if published(m.dir) {
			addToProxy(t, proxy, root, m.dir, module.Version{Path: m.file.Module.Mod.Path, Version: version}, files, mods)
		}
	}

	user := t.TempDir()
	writeFile(t, filepath.Join(user, "go.mod"), "module example.com/agent\n\ngo 1.26.0\n")
	writeFile(t, filepath.Join(user, "main.go"), `package main

import (
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/gcsguard"
)

func main() {
	_, err := gcsguard.New(gcsguard.Config{})
	tok, perr := fence.Parse("42")
	fmt.Println(errors.Is(err, fence.ErrInvalidConfig), tok, perr)
}
`)
	// The user's go.sum comes from the checksums this repository already
	// verified (a user gets the same from the checksum database); fencekit's
	// own modules are not in that database until they are published.
	var sums bytes.Buffer
	for _, f := range []string{"go.sum", "guards/gcsguard/go.sum"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		sums.Write(data)
	}
	writeFile(t, filepath.Join(user, "go.sum"), sums.String())

	modcache := strings.TrimSpace(goEnv(t, "GOMODCACHE"))
	env := append(os.Environ(),
		// fencekit from the test proxy; everything else from the module
		// cache's download directory (itself a proxy layout), then the
		// network proxy for anything the cache lacks.
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(modcache, "cache", "download")+","+goEnv(t, "GOPROXY"),
		"GONOSUMDB="+rootPath,
		"GOFLAGS=-mod=mod -trimpath -buildvcs=false",
		"GOWORK=off",
		// A private module cache, so the test proxy's zips never enter the
		// shared one (a later run with other files would read stale ones).
		"GOMODCACHE="+filepath.Join(t.TempDir(), "modcache"),
	)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = user
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("get", "github.com/fencekit/fencekit/guards/gcsguard@"+version)
	run("mod", "tidy")
	out := run("run", ".")
	if got, want := strings.TrimSpace(out), "true 42 <nil>"; got != want {
		t.Fatalf("user program printed %q, want %q", got, want)
	}
	// The requirement recorded is the release, resolved through the proxy.
	data, err := os.ReadFile(filepath.Join(user, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range mf.Require {
		got[r.Mod.Path] = r.Mod.Version
	}
	if got[rootPath+"/guards/gcsguard"] != version || got[rootPath] != version {
		t.Fatalf("user go.mod requires %v, want gcsguard and the root at %s", got, version)
	}
	if len(mf.Replace) != 0 {
		t.Fatalf("user go.mod has replace directives: %v", mf.Replace)
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
