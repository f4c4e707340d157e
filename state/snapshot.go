package state

import (
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
)

// StreamHandle locates one state file written into checkpoint storage.
type StreamHandle struct {
	Path string // location understood by the Storage that wrote it
	Size int64  // bytes, the binding header included
	// Checksum is the XXH64 of the whole file, its binding header (see
	// FileOwner) included: it depends on every byte, so a file replaced by
	// another (an older checkpoint's of the same name) does not verify.
	Checksum uint64
	// Legacy marks a file written by weir before metadata version 4: it
	// has no binding header and Checksum is its CRC32C (Castagnoli).
	Legacy bool
}

// KeyedStateHandle is one subtask's keyed state for a range of key groups.
// Offsets[i] is the byte offset of key group KeyGroups.Start+i in the file,
// so a rescaled job can read only the groups it owns.
//
// An incremental snapshot has Incremental set instead of a file and
// offsets: its state is the backend's own files, some shared with other
// checkpoints; only the backend that wrote it can restore it.
type KeyedStateHandle struct {
	StreamHandle
	KeyGroups   keygroup.Range
	Offsets     []int64
	Incremental *IncrementalHandle
}

// IncrementalHandle lists the files of an incremental keyed snapshot. Shared
// files are immutable and may be referenced by several checkpoints: one
// uploads a file, later ones refer to it while their backend still uses it.
// Storage deletes a shared file only when no remaining checkpoint refers
// to it. Private files belong to this checkpoint alone.
type IncrementalHandle struct {
	// Backend identifies the backend instance that wrote the files; shared
	// files are stored per backend and name.
	Backend string
	Shared  []NamedHandle
	Private []NamedHandle
}

// NamedHandle is a file of an incremental snapshot: its name in the
// backend's local directory and where it lies in checkpoint storage.
type NamedHandle struct {
	Name string
	StreamHandle
}

// Size is the total bytes of the files of h.
func (h *IncrementalHandle) Size() int64 {
	var n int64
	for _, f := range h.Shared {
		n += f.Size
	}
	for _, f := range h.Private {
		n += f.Size
	}
	return n
}

// OperatorStateHandle is one subtask's operator (non-keyed) state: named list
// states, each redistributed on restore according to its mode.
type OperatorStateHandle struct {
	StreamHandle
	States map[string]OperatorStateMeta
}

// Distribution is how an operator list state is redistributed on restore.
type Distribution uint8

const (
	// SplitDistribute splits the union of all subtasks' elements evenly.
	SplitDistribute Distribution = iota
	// UnionDistribute gives every subtask the union of all elements.
	UnionDistribute
	// BroadcastDistribute gives new subtask i the elements of old subtask
	// i mod the old parallelism: a broadcast state, which every subtask
	// holds whole and equal (Flink's repartitionBroadcastState).
	BroadcastDistribute
)

// OperatorStateMeta describes one named list state inside an
// OperatorStateHandle: its distribution and each element's offset.
type OperatorStateMeta struct {
	Distribution Distribution
	Offsets      []int64
}

// OperatorSubtaskState is everything one operator of a task's chain
// snapshotted for one checkpoint. Either part may be nil.
type OperatorSubtaskState struct {
	Keyed    *KeyedStateHandle
	Operator *OperatorStateHandle
	// Name is the operator's name (for errors that name an operator the
	// restored job lacks); Kind is the kind of operator (its
	// implementation: "source", "reduce", "two-phase-commit sink"), whose
	// state a restore hands only to an operator of the same kind; Schemas are its states' schemas (keyed
	// and operator states, sorted by name), checked when a restored
	// operator registers its states.
	Name    string
	Kind    string
	Schemas []StateSchema
	// Finished says the operator had finished in this subtask (FLIP-147):
	// it holds no state, and a restore deploys it finished.
	Finished bool
}

// Size is the total bytes of the state files.
func (s OperatorSubtaskState) Size() int64 {
	var n int64
	if s.Keyed != nil {
		n += s.Keyed.Size
		if s.Keyed.Incremental != nil {
			n += s.Keyed.Incremental.Size()
		}
	}
	if s.Operator != nil {
		n += s.Operator.Size
	}
	return n
}

// TaskSnapshot is what one task acknowledges for one checkpoint: the state of
// every operator in its chain, keyed by the operator's stable ID, and the
// data in flight on its channels if the checkpoint was unaligned. In a
// checkpoint's Metadata, a task that had finished before the checkpoint
// started is recorded with Finished set and its operators, each Finished
// and without state (before metadata version 6: without operators).
type TaskSnapshot struct {
	Operators map[string]OperatorSubtaskState
	// Channels is the task's channel state (an unaligned checkpoint), or
	// nil.
	Channels *ChannelStateHandle
	// Finished says the task had finished: a job restored from this
	// checkpoint deploys it finished (it runs nothing and its sources do
	// not replay).
	Finished bool
}

// Size is the total bytes of all state files of the snapshot.
func (s TaskSnapshot) Size() int64 {
	var n int64
	for _, o := range s.Operators {
		n += o.Size()
	}
	if s.Channels != nil {
		n += s.Channels.Size
	}
	return n
}

// TaskKey names one subtask of a job vertex.
type TaskKey struct {
	Vertex  string // stable vertex (task chain) ID
	Subtask int
}

// Metadata is the durable description of one completed checkpoint or
// savepoint: which state files make it up. It is written last; a checkpoint
// without valid metadata does not exist.
type Metadata struct {
	// JobID is the job whose checkpoint this is (see FileOwner); empty in
	// metadata before version 4.
	JobID     string
	ID        barrier.CheckpointID
	Timestamp int64 // unix ms of the trigger
	Kind      barrier.Kind
	Tasks     map[TaskKey]TaskSnapshot
	// Version is the format version of metadata decoded from an older
	// format than this weir writes (DecodeMetadata), whose contents a
	// restore may read differently (see the format's history in
	// metadata.go); 0 for metadata of the current format and for
	// metadata built in memory.
	Version uint16
}
