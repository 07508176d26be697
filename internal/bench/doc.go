// Package bench is the measurement harness of cmd/fence-bench: statistics
// (percentiles of latency samples, ratios of side-by-side rounds), the
// report (a table for people and one JSON line for machines) and the SVG
// chart drawn from the measured figures.
//
// It guarantees deterministic output for given figures (sorted JSON keys,
// fixed chart layout) and does no I/O beyond the writers it is given. It
// does not time anything itself and holds no speed targets: those are the
// Target fields the bench program fills in.
package bench
