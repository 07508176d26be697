package httpguard_test

import (
	"context"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/memguard"
)

// markOf returns the token of g's mark of resource: 0 when resource has
// none or is not a valid resource name.
func markOf(g *memguard.Guard, resource string) fence.Token {
	c, err := g.Mark(context.Background(), resource)
	if err != nil {
		return 0
	}
	return c.Token
}
