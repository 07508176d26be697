package s3guard

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/guards/internal/engine"
)

// Sweep removes the data objects of resource that can never become visible:
// those not named by the current pointer whose token is below the resource's
// mark. Writers that crashed between staging and committing, refused
// writers whose cleanup failed, and superseded content kept by
// KeepSuperseded leave such objects. Objects at or above the mark are left
// alone: a writer holding that token may still commit them. Sweep needs no
// clock and is safe to run at any time, concurrently with writers. It
// returns how many objects it removed.
func (s *Guard) Sweep(ctx context.Context, resource string) (_ int, err error) {
	if ctx == nil {
		return 0, s.eng.NilArgument(resource, "nil ctx")
	}
	defer func() { err = engine.ContextErr(ctx, "s3guard", err) }()
	if err := checkResource(s.prefix, resource); err != nil {
		return 0, err
	}
	cur, err := s.readPointer(ctx, resource)
	if err != nil {
		return 0, err
	}
	if cur.p == nil {
		return 0, nil
	}
	base := s.prefix + resource + "/"
	removed := 0
	for obj, err := range s.client.List(ctx, s.bucket, base) {
		if err != nil {
			return removed, fmt.Errorf("s3guard: list %q: %w", base, err)
		}
		if !strings.HasPrefix(obj, base) || obj == cur.p.Data {
			continue // not ours to judge, or the live content
		}
		tok, _, ok := parseDataLeaf(obj[len(base):])
		if !ok || tok >= cur.p.Token {
			continue
		}
		if err := s.client.Delete(ctx, s.bucket, obj); err != nil {
			return removed, fmt.Errorf("s3guard: remove %q: %w", obj, err)
		}
		removed++
	}
	return removed, nil
}
