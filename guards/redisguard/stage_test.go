package redisguard

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestFenceStageNested: fence.Stage in the callback of a Fence call made
// inside another guard's callback stages into the inner call, and the
// outer callback's context still stages into the outer one;
// fence.StageDelete stages a deletion.
func TestFenceStageNested(t *testing.T) {
	ctx := context.Background()
	so, si := newSpace(t), newSpace(t)
	var outer, inner fence.Guard = so.guard(t, Config{}), si.guard(t, Config{})
	ro, ri := so.resources+"o", si.resources+"i"
	err := outer.Fence(ctx, ro, 3, func(octx context.Context) error {
		err := inner.Fence(octx, ri, 8, func(ictx context.Context) error {
			if err := fence.Stage(ictx, []byte("inner")); err != nil {
				return err
			}
			return fence.Stage(octx, []byte("outer"))
		})
		if err != nil {
			return err
		}
		if err := fence.Stage(octx, []byte("again")); !errors.Is(err, fence.ErrAlreadyStaged) {
			t.Errorf("outer Stage after the inner call: %v, want fence.ErrAlreadyStaged", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		g        fence.Guard
		resource string
		value    string
		token    fence.Token
	}{{outer, ro, "outer", 3}, {inner, ri, "inner", 8}} {
		b, info, err := w.g.(*Guard).Get(ctx, w.resource)
		if err != nil || string(b) != w.value || info.Token != w.token {
			t.Errorf("Get(%q) = %q, token %d, %v; want %q, token %d", w.resource, b, info.Token, err, w.value, w.token)
		}
	}
	if err := outer.Fence(ctx, ro, 4, fence.StageDelete); err != nil {
		t.Fatal(err)
	}
	if _, _, err := outer.(*Guard).Get(ctx, ro); !errors.Is(err, fence.ErrNotFound) {
		t.Errorf("Get after fence.StageDelete: %v, want fence.ErrNotFound", err)
	}
}
