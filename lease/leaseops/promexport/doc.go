// Package promexport checks, in a module of its own so that the Prometheus
// client stays out of fencekit's dependencies, the names under which
// fencekit's instruments reach Prometheus through the OpenTelemetry
// Prometheus exporter. It has no API; its test is the check.
package promexport
