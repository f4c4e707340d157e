// Package multiinput holds the end-to-end tests of weir's operators with
// several inputs, through the public API: union, connected streams and
// co-process functions, keyed co-process functions with timers, broadcast
// state and side outputs; in-process and over TCP, with aligned and
// unaligned checkpoints, task kills, savepoints at another parallelism,
// the pebble backend and a cluster. It has no code of its own: the tests
// live here so that they run in parallel with the root package's.
package multiinput
