// Package upgradetest holds the end-to-end tests of upgrading a job
// through a savepoint: a job (v1) stopped halfway with a savepoint and a
// changed job (v2) started from it, through weir's public API, each
// upgrade checked against the exact output of an uninterrupted run or
// against the error that refuses it. The package has no code of its own;
// its tests run in parallel with the root package's.
package upgradetest
