// Package pebble implements state.KeyedBackend on an embedded pebble LSM
// database (Flink's RocksDB keyed state backend): state larger than memory,
// a bounded block cache and memtables, and snapshots whose synchronous part
// costs O(1).
//
// A Backend owns one pebble database in a working directory of its own
// under Config.Dir, removed on Close. Keys are laid out so that every key
// group is one contiguous key range (see keys.go): a snapshot, a restore
// and a rescale read a key group with one range scan. Value, reducing and
// aggregating states are one pebble key per key; a list state is one key
// whose elements are appended with pebble's concatenating merge operator
// (no read on Add); a map state is one pebble key per user key, under the
// key's prefix, iterated by prefix.
//
// Snapshots are full by default: the synchronous part takes a pebble
// snapshot, the asynchronous part writes the self-contained keyed snapshot
// format that every backend reads (state.KeyedSnapshotWriter), so
// checkpoints and savepoints move freely between this backend and the heap
// backend, at any parallelism.
//
// The write-ahead log is off and no file of the working directory is ever
// synced (noSyncFS): state is recovered from checkpoints, never from the
// local disk.
//
// In front of the database sits a write-back cache, bounded in bytes
// (Config.CacheBytes): the values of value, list, reducing and aggregating
// states by their data key, as the heap backend holds them. A cached key
// is read, written and folded in place (state.Updater) without touching
// pebble; a miss reads the database once and caches what it found,
// absence included; a Put or Delete of an uncached key reads nothing; a
// list not cached merges its element into the database without a read.
// Cold entries are evicted (CLOCK, second chance), the dirty ones written
// in one sorted batch per eviction round; dirty entries beyond
// Config.DirtyBytes are written back in one sorted batch and stay cached.
// A snapshot's synchronous part writes every dirty entry in one batch
// before it takes pebble's snapshot or local checkpoint, so full and
// incremental checkpoints, rescaling, TTL and the timer services work on
// the database as before. Evictions write to the working database only,
// never to a completed checkpoint's files: a crash loses nothing the last
// completed checkpoint had. Map states are not cached. A failed batch
// commit fails the backend: every later call returns the error.
//
// Where lookups miss (PrefetchWanted), Prefetch reads the state of many
// keys, those of a network buffer's records, into the cache ahead of the
// records, in one pass over sorted keys through one iterator (or, for
// many keys, two passes over halves on two goroutines): a forward seek
// costs less than half of a random point read (BenchmarkReadFloor).
//
// Incremental checkpoints (Config.Incremental) flush the memtables and
// hard-link the database's files at the barrier, and upload only the
// table files no completed checkpoint uploaded before (see incremental.go
// and state.IncrementalHandle); savepoints stay full.
//
// A local disk that fails (full, read-only) fails the backend: the first
// failed background flush or compaction is returned by every later write,
// so the task fails with the cause. Pebble stalls writes, uncancellably,
// once Config.MemTables memtables wait for a flush; the failure of the
// first flush is reported long before that many fill up.
package pebble
