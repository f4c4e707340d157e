// Package joins holds the end-to-end tests of weir's joins and async
// I/O: jobs built with the public API (IntervalJoin, Join, CoGroup,
// AsyncMap) run in-process and over TCP, aligned and unaligned, with task
// kills, savepoint rescales, the pebble backend and cluster mode, each
// checked exactly against a batch computation of the same input. They sit
// in their own package so that they run in parallel with the root
// package's tests.
package joins
