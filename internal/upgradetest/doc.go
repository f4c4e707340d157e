// Package upgradetest holds the end-to-end tests of upgrading a job
// through a savepoint: a job (v1) stopped halfway with a savepoint and a
// changed job (v2) started from it, through weir's public API, each
// upgrade checked against the exact output of an uninterrupted run or
// against the error that refuses it: a keyed running sum into a file sink
// (upgrade_test.go); windows, an interval join, async I/O and a keyed
// co-process function (operators_test.go); a broadcast state
// (broadcast_test.go); renamed sources and sinks, a
// Kafka source with another topic list, a two-phase-commit sink's
// transaction type (kinds_test.go); a source's reader swapped under its
// UID, a file source on another file, a source added
// (sources_test.go); a source that had finished
// (finished_test.go); a savepoint of metadata version 4
// (fixture_test.go); a refused restore under a restart strategy fails
// once (restart_test.go). The package has no code of its own; its tests run in
// parallel with the root package's.
package upgradetest
