package natsguard

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/guards/guardtest"
)

// TestFaultWritersConcurrent: the subject's OutcomeWriter and
// DuplicateWriter run from several goroutines at once on different
// resources (under -race), each with the outcome it has alone.
func TestFaultWritersConcurrent(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	sub := kitSubject{subject{guard(t, bucket, Config{})}, guard(t, bucket, Config{Strict: true}), bucket}
	cfg, err := guardtest.Config{Writers: 8}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := guardtest.CheckFaultWritersConcurrent(context.Background(), sub, cfg); err != nil {
		t.Error(err)
	}
}
