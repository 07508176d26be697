package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Files for external migration tools, generated from the lease/, guard/, effects/
// and mcp/ files by ToolFiles (go generate ./sql/migrations, or make migrations). A
// test fails when they differ from what ToolFiles produces.
//
//go:embed goose golang-migrate
var toolFiles embed.FS

// Tool names a migration tool ToolFS serves files for.
type Tool string

const (
	// Goose is github.com/pressly/goose/v3: one NNNN_name.sql per version
	// with -- +goose Up / Down sections, each one statement block.
	Goose Tool = "goose"
	// GolangMigrate is github.com/golang-migrate/migrate/v4: NNNN_name.up.sql
	// and NNNN_name.down.sql pairs.
	GolangMigrate Tool = "golang-migrate"
)

// ToolFS returns the files of set in tool's format, as a directory with the
// migration files at its root (for goose.NewProvider or golang-migrate's
// iofs source). Each set is versioned on its own from 1, so each set needs
// its own version table in the tool (see the package documentation).
func ToolFS(tool Tool, set Set) (fs.FS, error) {
	switch tool {
	case Goose, GolangMigrate:
	default:
		return nil, fmt.Errorf("migrations: unknown migration tool %q", tool)
	}
	if _, err := Migrations(set); err != nil {
		return nil, err
	}
	return fs.Sub(toolFiles, string(tool)+"/"+string(set))
}

// The version table that every fencekit migration records itself in,
// whichever tool applies it; Validate reads it.
const versionTableDDL = `CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version))`

// sqlString quotes s as a SQL string literal. Set and migration names come
// from the embedded file names (letters, digits, '_').
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func recordUp(m Migration) string {
	return versionTableDDL + ";\n" + fmt.Sprintf(
		"INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES (%s, %d, %s)\n    ON CONFLICT (set_name, version) DO NOTHING;\n",
		sqlString(string(m.Set)), m.Version, sqlString(m.Name))
}

func recordDown(m Migration) string {
	s := fmt.Sprintf("DELETE FROM fencekit_schema_migrations WHERE set_name = %s AND version = %d;\n", sqlString(string(m.Set)), m.Version)
	if m.Version == 1 {
		// The first version of a set going down: drop the version table
		// once no set has a row in it, so that all the way down leaves
		// nothing of fencekit behind.
		s += `DO $fencekit$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM fencekit_schema_migrations) THEN
        DROP TABLE fencekit_schema_migrations;
    END IF;
END $fencekit$;
`
	}
	return s
}

// downScript is the down script of m that every tool file carries and
// Down runs: the removal of m's version row (and, at version 1, of the
// emptied version table) followed by m's .down.sql body.
func downScript(m Migration) string {
	return recordDown(m) + "\n" + strings.TrimRight(m.Down, "\n") + "\n"
}

func header(m Migration) string {
	return fmt.Sprintf("-- Code generated from %s/%04d_%s.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.\n"+
		"-- Apply with search_path set to the target schema; objects are unqualified.\n", m.Set, m.Version, m.Name)
}

// ToolFiles renders the files of every set for goose and golang-migrate
// from the embedded migrations: path (relative to sql/migrations) → content.
// Each up file also records its version in fencekit_schema_migrations, and
// each down file removes that row, so Validate works whichever tool applied
// the schema.
func ToolFiles() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, set := range []Set{Lease, Guard, Effects, MCP} {
		ms, err := Migrations(set)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			base := fmt.Sprintf("%04d_%s", m.Version, m.Name)
			up := strings.TrimRight(m.Up, "\n") + "\n\n" + recordUp(m)
			down := downScript(m)
			out[path.Join(string(GolangMigrate), string(set), base+".up.sql")] = []byte(header(m) + "\n" + up)
			out[path.Join(string(GolangMigrate), string(set), base+".down.sql")] = []byte(header(m) + "\n" + down)
			out[path.Join(string(Goose), string(set), base+".sql")] = []byte(header(m) +
				"\n-- +goose Up\n-- +goose StatementBegin\n" + up + "-- +goose StatementEnd\n" +
				"\n-- +goose Down\n-- +goose StatementBegin\n" + down + "-- +goose StatementEnd\n")
		}
	}
	return out, nil
}

// shippedToolFiles lists the embedded tool files, path → content.
func shippedToolFiles() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(toolFiles, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".sql") {
			return err
		}
		b, err := fs.ReadFile(toolFiles, p)
		out[p] = b
		return err
	})
	return out, err
}

// StaleToolFiles compares the embedded tool files with ToolFiles and
// returns the paths that are missing, differ or are left over, sorted.
func StaleToolFiles() ([]string, error) {
	want, err := ToolFiles()
	if err != nil {
		return nil, err
	}
	got, err := shippedToolFiles()
	if err != nil {
		return nil, err
	}
	var stale []string
	for p, w := range want {
		if g, ok := got[p]; !ok || string(g) != string(w) {
			stale = append(stale, p)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			stale = append(stale, p)
		}
	}
	sort.Strings(stale)
	return stale, nil
}
