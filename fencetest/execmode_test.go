package fencetest_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fencetest"
)

// TestExecModeNames: every mode's name parses back to it, and a URL made by
// URLWithExecMode gives pgx that mode; bad names and URLs are refused.
func TestExecModeNames(t *testing.T) {
	for _, m := range fencetest.ExecModes {
		got, err := fencetest.ParseExecMode(fencetest.ExecModeName(m))
		if err != nil || got != m {
			t.Fatalf("ParseExecMode(%q) = %v, %v", fencetest.ExecModeName(m), got, err)
		}
		u, err := fencetest.URLWithExecMode("postgres://u@127.0.0.1:5432/db?sslmode=disable", m)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if cfg.DefaultQueryExecMode != m || cfg.Database != "db" {
			t.Fatalf("%s: mode %v database %q", u, cfg.DefaultQueryExecMode, cfg.Database)
		}
	}
	if _, err := fencetest.ParseExecMode("simple protocol"); err == nil {
		t.Fatal("a name with a space was accepted")
	}
	if _, err := fencetest.URLWithExecMode("host=x", pgx.QueryExecModeExec); err == nil {
		t.Fatal("a key=value string was accepted as a URL")
	}
}
