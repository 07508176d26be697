package quickstart_test

import (
	"os"
	"testing"

	"github.com/fencekit/fencekit/fencetest"
)

// TestMain skips the example in -short mode: it needs PostgreSQL and MinIO.
func TestMain(m *testing.M) {
	fencetest.SkipExamplesInShort()
	os.Exit(m.Run())
}
