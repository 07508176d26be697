// Package archtest holds one test: that every Go package of the repository
// imports only the fencekit packages docs/architecture.md allows it. The
// table in that page is the rule; the test reads it, so the page cannot drift
// from the code.
package archtest
