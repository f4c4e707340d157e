// Package state holds the state of a job's operators and makes it durable
// at checkpoints.
//
// # State backends
//
// A state backend is where one subtask's operator state lives while the job
// runs, and what turns it into checkpoint files and back. There are two
// kinds of state, each with its own backend:
//
//   - Keyed state belongs to a key of a keyed stream. A KeyedBackend serves
//     one subtask's range of key groups; before each record the task calls
//     SetCurrentKey, and every access through ValueState, ListState,
//     MapState, ReducingState and AggregatingState is scoped to that key.
//     Typed states are created from descriptors (GetValueState and friends)
//     and encode values with codec.Codec. KeyedBackend itself is
//     byte-oriented — (state, key group, key, user key) → value bytes — so a
//     new backend implements only that; package heap is the in-memory one,
//     package pebble the embedded LSM one (state larger than memory,
//     incremental checkpoints).
//   - Operator state belongs to a subtask, not to a key: named lists
//     (GetOperatorListState) in an OperatorBackend. On restore a
//     SplitDistribute list gets an even share of the union of all previous
//     subtasks' elements, a UnionDistribute list gets all of them.
//
// # State TTL
//
// A descriptor's TTL gives each value (each list element, each map entry)
// a processing-time lifetime renewed on every write. The typed states
// store the expiration time before the value and never return an expired
// one; backends that implement TTLBackend leave expired values out of
// their full snapshots (DropExpired).
//
// # Key groups
//
// Keys are hashed into MaxParallelism key groups (internal/keygroup); a
// subtask owns a contiguous range of groups. Keyed snapshots are written
// per key group, and KeyedStateHandle.Offsets locates each group, so that a
// job restored with another parallelism reads from every previous file just
// the groups it now owns.
//
// # Snapshots: synchronous and asynchronous parts
//
// Snapshot has two parts. The synchronous part runs on the task goroutine,
// between two records, and only freezes the current state (the heap
// backend records map pointers and bumps a version: no copying). It
// returns a function, the asynchronous part, that writes the frozen state
// to checkpoint storage on another goroutine while the task goes on
// updating state; copy-on-write keeps the two apart.
//
// # Checkpoint storage
//
// Storage holds the files: FileStorage writes, in a job's own place
// <dir>/<job-id>/, chk-<id>/<name> per task state and chk-<id>/_metadata
// last (a checkpoint without valid metadata does not exist), and locks the
// place while the job runs (Lock). Every file is written atomically and
// durably; every state file starts with a binding header naming its job,
// checkpoint, task and operator (FileOwner), and its handle records the
// XXH64 of the whole file, checked on read (*CorruptError). Metadata must
// be that of its chk-<id> and job. Verify checks every file of a
// checkpoint against where its metadata files it; Latest finds the newest
// checkpoint that verifies, logging each it skips; ExportSavepoint copies one into a
// self-contained savepoint directory, OpenSavepoint reads it back.
// NewMemoryStorage is a FileStorage on an in-memory FS for tests; FS is the
// seam for injecting file system failures. EncodeMetadata and
// EncodeTaskSnapshot are the versioned, checksummed binary formats of a
// checkpoint's metadata and of one task's snapshot (which the control plane
// carries from a worker to the coordinator).
//
// # Channel state and finished tasks
//
// An unaligned checkpoint also holds the data in flight between tasks:
// each task's ChannelState (the buffers and watermark events each input
// channel had received before its barrier, and those its own barrier
// overtook in each output subpartition), written by WriteChannelState as
// one file and referenced by TaskSnapshot.Channels. Restoring it puts the
// items back in flight, in order, before any new data; it restores only at
// the parallelism it was taken at. A task that had finished when a
// checkpoint started is recorded in the Metadata with
// TaskSnapshot.Finished and no state: a restored job runs nothing of it.
// Metadata and task snapshots are at version 4 (the job ID, 64-bit
// checksums); versions 1 to 3 are still read, their files verified by the
// CRC32C they recorded (StreamHandle.Legacy).
//
// # Incremental snapshots and shared files
//
// A backend may snapshot incrementally when its StateWriterFactory is a
// SharedStateWriterFactory (FileStorage is): its KeyedStateHandle then
// lists, in Incremental, files shared between checkpoints (written once,
// referred to by later checkpoints) and files of its own. FileStorage
// keeps shared files under <dir>/shared/<backend>/ and counts references
// through the metadata of the checkpoints in its directory: Discard
// deletes the shared files of the discarded checkpoint that no other
// checkpoint refers to; Latest verifies shared files too. A backend
// refers only to files of checkpoints it was told completed
// (CheckpointListener). Savepoints hide shared files (FullSnapshotsOnly)
// and are always self-contained.
//
// # The caller's duties, in order
//
//  1. Create the backends (heap.New or pebble.New with the subtask's max
//     parallelism, parallelism and index; NewOperatorBackend).
//  2. On a restart, Restore them from the handles of ALL previous subtasks
//     of the operator (from Storage.Latest or OpenSavepoint), before
//     creating any state.
//  3. Create the typed states from descriptors (once, at operator open).
//  4. For each record: SetCurrentKey(serialized key, key group), then read
//     and update state. Only the task goroutine touches the backend.
//  5. At a checkpoint, in the same mailbox step as the barrier: call
//     Snapshot on each backend (synchronous part) with writers scoped per
//     task and operator (PrefixedWriters), then hand the returned functions
//     to another goroutine and call each exactly once; collect the handles
//     into an OperatorSubtaskState and acknowledge.
//  6. The coordinator writes the Metadata (WriteMetadata) once every task
//     acknowledged, tells the tasks (which tell their keyed backends that
//     are CheckpointListeners), and Discards checkpoints beyond retention.
//  7. Close the backends when the task ends, after the asynchronous parts
//     in flight have returned.
package state
