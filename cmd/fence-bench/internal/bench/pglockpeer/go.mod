module github.com/fencekit/fencekit/cmd/fence-bench/internal/bench/pglockpeer

go 1.26.0

require (
	cirello.io/pglock v1.16.1
	github.com/lib/pq v1.10.9
)
