// Package release checks that fencekit's modules can be consumed the way a
// user consumes them: from a module proxy, by version, with no replace
// directive and no go.work.
//
// The test builds a file-system module proxy (GOPROXY=file://…) holding the
// root module and every nested library module at the release version their
// go.mod files name, made from the working tree's files, and builds a fresh
// module outside the repository that requires guards/gcsguard by that
// version. Guaranteed: the versioning scheme in CONTRIBUTING.md is internally
// consistent (every nested module requires the root at one version, and
// CHANGELOG.md has a section for it). Not checked: that the tags exist on a
// public host — that is the release step itself.
package release
