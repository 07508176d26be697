package s3guard

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/guards/guardtest"
)

// TestFaultWritersConcurrent: the subject's OutcomeWriter and
// DuplicateWriter run from several goroutines at once on different
// resources (under -race), each with the outcome it has alone.
func TestFaultWritersConcurrent(t *testing.T) {
	sub := newSubject(t, newEnv(t, clientKinds[0]), false, func(*Config) {})
	cfg, err := guardtest.Config{Writers: 8}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := guardtest.CheckFaultWritersConcurrent(context.Background(), sub, cfg); err != nil {
		t.Error(err)
	}
}
