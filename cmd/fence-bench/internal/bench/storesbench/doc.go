// Command storesbench measures the guards of the stores whose clients live
// in nested modules (guards/redisguard, guards/mysqlguard, guards/natsguard)
// against the same store's plain write, interleaved operation by operation
// with internal/bench's Interleave, and prints the metrics as lines of JSON
// (bench.WriteMetricLines). The Redis case also runs the same SET under
// the lock libraries Go users pick for Redis (github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4: obtain, SET, release). It is a module of its own so that neither the
// main module nor the guards' modules depend on what the bench needs;
// cmd/fence-bench runs it with `go run . -only <store>` (make bench).
//
// Usage:
//
//	eval "$(scripts/services.sh)"; cd internal/bench/storesbench && go run . [-quick] [-only redis,mysql,nats]
package main
