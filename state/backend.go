package state

import (
	"context"
	"fmt"
	"io"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
)

// Kind is the kind of a keyed state: it fixes how the typed layer lays out
// the state's bytes and whether the state has user keys.
type Kind uint8

const (
	// KindValue holds one value per key.
	KindValue Kind = iota + 1
	// KindList holds a list per key; elements are appended with
	// KeyedBackend.Append, each framed as uvarint(len) | bytes.
	KindList
	// KindMap holds a map of user key to value per key.
	KindMap
	// KindReducing holds one value per key, folded with a reduce function.
	KindReducing
	// KindAggregating holds one accumulator per key.
	KindAggregating
)

func (k Kind) String() string {
	switch k {
	case KindValue:
		return "value"
	case KindList:
		return "list"
	case KindMap:
		return "map"
	case KindReducing:
		return "reducing"
	case KindAggregating:
		return "aggregating"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= KindValue && k <= KindAggregating }

// StateID identifies one registered state within one KeyedBackend. IDs are
// only meaningful to the backend that issued them.
type StateID uint32

// StateMeta names one registered keyed state.
type StateMeta struct {
	Name string
	Kind Kind
}

// KeyedSnapshotFunc is the asynchronous part of a keyed snapshot. It must be
// called exactly once, off the task goroutine; it releases the snapshot's
// resources whatever the outcome (also when ctx is already done).
type KeyedSnapshotFunc func(ctx context.Context) (*KeyedStateHandle, error)

// KeyedBackend is the byte-oriented keyed state backend of one subtask: it
// stores (state, key group, key, user key) → value bytes for the key groups
// of its range. The typed states (ValueState, ListState, MapState,
// ReducingState, AggregatingState) are written once on top of it, so a new
// backend (in memory, an embedded LSM) implements only this interface.
//
// A KeyedBackend is used by a single goroutine (the task's), except that the
// function returned by Snapshot runs on another goroutine, concurrently with
// further updates.
//
// Every access is scoped to the current key set by SetCurrentKey. userKey is
// nil for every kind except KindMap. Byte slices passed in are not retained;
// byte slices returned are owned by the backend, must not be modified, and
// are valid only until the next call on the backend.
type KeyedBackend interface {
	// KeyGroupRange is the range of key groups this backend serves.
	KeyGroupRange() keygroup.Range
	// MaxParallelism is the total number of key groups of the job.
	MaxParallelism() int
	// Register returns the ID of the state called name, registering it on
	// first use. It returns an error if name is registered with another kind.
	Register(name string, kind Kind) (StateID, error)
	// States lists the registered states, in StateID order.
	States() []StateMeta

	// SetCurrentKey sets the key (serialized) and its key group for all
	// following accesses. key is copied. A key group outside
	// KeyGroupRange is refused with a *KeyGroupError, the current key
	// unchanged.
	SetCurrentKey(key []byte, keyGroup int) error
	// CurrentKey returns the current key and key group (nil, -1 if unset).
	CurrentKey() (key []byte, keyGroup int)

	// Get returns the value of (s, current key, userKey).
	Get(s StateID, userKey []byte) (value []byte, ok bool, err error)
	// Put sets the value of (s, current key, userKey).
	Put(s StateID, userKey, value []byte) error
	// Append appends value to the bytes stored for (s, current key), creating
	// them if absent (the list state's add).
	Append(s StateID, value []byte) error
	// Delete removes (s, current key, userKey); for kinds other than map it
	// removes the current key's value. Deleting a missing entry is no error.
	Delete(s StateID, userKey []byte) error
	// Clear removes everything s holds for the current key (for a map state:
	// every user entry).
	Clear(s StateID) error
	// Iterate calls fn for each user entry of (s, current key) of a map
	// state, in no particular order, until fn returns false. fn must not
	// modify the backend.
	Iterate(s StateID, fn func(userKey, value []byte) bool) error
	// Entries calls fn for every entry of s across all keys and key groups
	// of KeyGroupRange, until fn returns false: for a map state once per
	// user entry, for other kinds once per key (userKey nil). The order is
	// unspecified. It neither needs nor changes the current key. fn must not
	// modify the backend; the slices it gets are valid only during the call.
	// Timer services use it to rebuild their in-memory queues after Restore.
	Entries(s StateID, fn func(key []byte, keyGroup int, userKey, value []byte) bool) error

	// Snapshot runs the synchronous part of a snapshot for checkpoint id on
	// the task goroutine and returns the asynchronous part, which writes the
	// state file through w (name "keyed") and returns its handle.
	Snapshot(id barrier.CheckpointID, w StateWriterFactory) (KeyedSnapshotFunc, error)
	// Restore loads the key groups of KeyGroupRange from the handles of all
	// previous subtasks (so that rescaling works). It must be called before
	// any other use.
	Restore(handles []KeyedStateHandle, r StateReader) error
	// Close releases the backend. It is idempotent.
	Close() error
}

// StateWriter writes one state file into checkpoint storage.
type StateWriter interface {
	io.Writer
	// Close makes the file durable and returns its handle.
	Close() (StreamHandle, error)
	// Abort discards the file. It is safe after a failed Close.
	Abort() error
}

// StateWriterFactory creates state files for a checkpoint. Names must be
// unique within a checkpoint (per task, operator and kind of state).
type StateWriterFactory interface {
	CreateStateWriter(id barrier.CheckpointID, name string) (StateWriter, error)
}

// StateFile is a verified state file opened for reading.
type StateFile interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// StateReader opens state files by handle, verifying their checksum (a
// corrupt or truncated file yields a *CorruptError).
type StateReader interface {
	OpenState(h StreamHandle) (StateFile, error)
}

// SharedStateWriterFactory is a StateWriterFactory of checkpoint storage
// that also keeps files shared between checkpoints (incremental
// snapshots). A backend that snapshots incrementally checks for it and
// writes full snapshots without it.
type SharedStateWriterFactory interface {
	StateWriterFactory
	// CreateSharedStateWriter creates a shared file, name, of the backend
	// instance backend, uploaded for checkpoint id. Later checkpoints may
	// refer to it; it is deleted once no remaining checkpoint does (see
	// IncrementalHandle).
	CreateSharedStateWriter(id barrier.CheckpointID, backend, name string) (StateWriter, error)
}

// UpdateFunc computes the new value of a key from its old one: old is the
// stored value (ok false if there is none); it appends the new value to dst
// and returns the result. dst may share memory with old, so fn reads old
// completely before it appends, and it returns an error, which stores
// nothing, only before it appends.
type UpdateFunc func(old []byte, ok bool, dst []byte) ([]byte, error)

// Updater is implemented by keyed backends that can rewrite a value where
// it is stored: Update(s, fn) is Get then Put of (s, current key) with one
// lookup, and no copy when the new value fits where the old one is. The
// reducing and aggregating states use it when the backend has it. s must
// not be a map state.
type Updater interface {
	Update(s StateID, fn UpdateFunc) error
}

// CheckpointListener is implemented by keyed backends that want to know
// which checkpoints completed (an incremental backend refers only to files
// of completed checkpoints). The task calls it on its own goroutine.
type CheckpointListener interface {
	NotifyCheckpointComplete(id barrier.CheckpointID)
}

// PrefixedWriters returns a factory that prefixes every name with prefix and
// a dash, so that one task can hand each operator's backend its own
// namespace (e.g. prefix "map-3-op2" makes "map-3-op2-keyed"). If f is a
// SharedStateWriterFactory, so is the result (shared files are named by
// their backend, not prefixed).
func PrefixedWriters(f StateWriterFactory, prefix string) StateWriterFactory {
	p := prefixed{f: f, prefix: prefix}
	if sf, ok := f.(SharedStateWriterFactory); ok {
		return prefixedShared{prefixed: p, sf: sf}
	}
	return p
}

type prefixed struct {
	f      StateWriterFactory
	prefix string
}

func (p prefixed) CreateStateWriter(id barrier.CheckpointID, name string) (StateWriter, error) {
	return p.f.CreateStateWriter(id, p.prefix+"-"+name)
}

type prefixedShared struct {
	prefixed
	sf SharedStateWriterFactory
}

func (p prefixedShared) CreateSharedStateWriter(id barrier.CheckpointID, backend, name string) (StateWriter, error) {
	return p.sf.CreateSharedStateWriter(id, backend, name)
}

// FullSnapshotsOnly hides f's shared files, if any, so that backends write
// self-contained snapshots: the task uses it for savepoints.
func FullSnapshotsOnly(f StateWriterFactory) StateWriterFactory { return fullOnly{f} }

type fullOnly struct{ f StateWriterFactory }

func (f fullOnly) CreateStateWriter(id barrier.CheckpointID, name string) (StateWriter, error) {
	return f.f.CreateStateWriter(id, name)
}

// KeyGroupError is a key group outside the key groups of a subtask (its
// backend's range): a record routed to the wrong subtask, or corrupt input
// (a key group read from the wire or a file). It fails the task.
type KeyGroupError struct {
	Group int
	Range keygroup.Range
}

func (e *KeyGroupError) Error() string {
	return fmt.Sprintf("state: key group %d outside this subtask's key groups %s (a record routed to the wrong subtask, or corrupt)", e.Group, e.Range)
}
