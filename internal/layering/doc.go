// Package layering holds only a test: that weir's packages import each
// other as docs/architecture.md's package table and rules say, and that no
// non-test code type-asserts a pointer to another weir package's type (a
// seam is an interface owned by its consumer, with optional interfaces for
// a backend's extras).
package layering
