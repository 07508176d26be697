package quickstart_test

import (
	"os"
	"testing"

	"github.com/fencekit/fencekit/internal/testsvc"
)

// TestMain skips the example in -short mode: it needs PostgreSQL and MinIO.
func TestMain(m *testing.M) {
	testsvc.SkipServiceExamples()
	os.Exit(m.Run())
}
