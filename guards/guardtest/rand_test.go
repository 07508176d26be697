package guardtest_test

import (
	"math/rand/v2"
	"testing"
)

func randFor(*testing.T) *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
