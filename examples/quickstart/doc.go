// Package quickstart is the README's quick start as a runnable example: one
// AI-agent tool call under the lease of a conversation, writing an object
// through s3guard and a row through pgguard with nothing but its ctx, and a
// second device that continues the conversation while the first run is
// paused. It has no API of its own.
//
// Guaranteed: the example runs in `make test` against the real PostgreSQL and
// MinIO and checks its output, in a schema and a bucket of its own (random
// names, removed when it ends), so runs never share state; with go test
// -short (make test/short) it is skipped and needs no service. Not
// guaranteed: anything beyond what the packages it uses (lease,
// guards/pgguard, guards/s3guard) state.
package quickstart
