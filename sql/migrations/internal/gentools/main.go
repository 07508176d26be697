// Command gentools writes the goose and golang-migrate files of
// sql/migrations from its embedded migrations (go generate
// ./sql/migrations). It removes tool files no migration produces.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencekit/fencekit/sql/migrations"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gentools:", err)
		os.Exit(1)
	}
}

func run() error {
	files, err := migrations.ToolFiles()
	if err != nil {
		return err
	}
	for _, tool := range []string{string(migrations.Goose), string(migrations.GolangMigrate)} {
		err := filepath.WalkDir(tool, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".sql") {
				return err
			}
			if _, ok := files[filepath.ToSlash(p)]; !ok {
				return os.Remove(p)
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil { //nolint:gosec // migration files are meant to be world-readable
			return err
		}
	}
	return nil
}
