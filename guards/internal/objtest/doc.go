// Package objtest holds the test helpers the object-store guards
// (guards/s3guard, guards/gcsguard) share beyond the guardtest kit: a
// transport that holds the first copy of a committing request in transit,
// the check that such a delayed copy is refused once a later write
// replaced what it was conditional on, and the nil-context and not-found
// checks of their read and write calls. Only their tests import it.
package objtest
