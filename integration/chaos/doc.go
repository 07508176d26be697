// Package chaos runs fencekit under faults and checks what happened.
//
// Run starts many executions — goroutines in the test process and child
// processes (the test binary re-executed) — that compete for a few lease
// keys and, while they trust their lease, write through the PostgreSQL, S3
// (MinIO) and HTTP guards to shared resources. Faults are injected at random
// from a seed: holder pauses beyond the TTL, SIGSTOP and SIGKILL of child
// processes, PostgreSQL and MinIO connections cut, held or slowed through
// internal/netproxy, lost replies, and a PostgreSQL crash and restart (on a
// private cluster from internal/pgcluster). Every
// acquisition, renewal, loss, work step and guarded write is recorded in a
// history (package integration/history), the final state of every resource
// is read back, and the history is checked.
//
// # What is guaranteed
//
//   - The seed determines every random choice of a run (keys, steps,
//     faults, their timing); a failing run prints its seed and the command
//     that replays it.
//   - A run that grants no lease, accepts no write or injects no fault is
//     reported by the tests as proving nothing.
//   - Every child process is waited for, every proxy and pool closed.
//
// # What is not guaranteed
//
//   - The interleaving of goroutines and processes is not reproducible: a
//     replay repeats the schedule, not the exact history.
//   - The checker judges what was recorded; see package history.
//   - The PostgreSQL restart fault needs the Debian PostgreSQL tools; it
//     never restarts the shared server.
//
// docs/testing.md describes the faults, the CI pass, the soak (make chaos)
// and how to replay a seed.
package chaos
