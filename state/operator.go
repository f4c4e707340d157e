package state

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
)

// OperatorBackend holds one subtask's operator (non-keyed) state: named list
// states whose elements are redistributed on restore by their Distribution
// (Flink's OperatorStateBackend). It is used by the task goroutine only;
// the asynchronous part of a snapshot reads a frozen copy.
type OperatorBackend struct {
	states  map[string]*opState
	schemas Schemas
}

// StateSchemas returns the schemas of the backend's states (SchemaHolder).
func (b *OperatorBackend) StateSchemas() *Schemas { return &b.schemas }

type opState struct {
	dist  Distribution
	elems [][]byte // encoded elements; never modified in place
}

// NewOperatorBackend returns an empty operator state backend.
func NewOperatorBackend() *OperatorBackend {
	return &OperatorBackend{states: map[string]*opState{}}
}

// Names lists the backend's states, sorted.
func (b *OperatorBackend) Names() []string {
	names := make([]string, 0, len(b.states))
	for n := range b.states {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// operatorListKind is the schema Kind of an operator list state of dist.
func operatorListKind(dist Distribution) string {
	switch dist {
	case UnionDistribute:
		return "operator list (union)"
	case BroadcastDistribute:
		return "operator list (broadcast)"
	}
	return "operator list (split)"
}

// OperatorListState is a list of elements owned by one subtask.
type OperatorListState[T any] struct {
	s *opState
	c codec.Codec[T]
}

// GetOperatorListState returns the operator list state described by d,
// redistributed on restore by dist. Getting the same name again returns a
// state over the same elements; a different distribution is an error.
func GetOperatorListState[T any](b *OperatorBackend, d ListDescriptor[T], dist Distribution) (*OperatorListState[T], error) {
	if d.Name == "" || d.Codec == nil {
		return nil, errors.New("state: operator list state needs a name and a codec")
	}
	if dist != SplitDistribute && dist != UnionDistribute && dist != BroadcastDistribute {
		return nil, fmt.Errorf("state: operator list state %q: unknown distribution %d", d.Name, dist)
	}
	if d.TTL.enabled() {
		return nil, fmt.Errorf("state: operator list state %q: a TTL is for keyed state only", d.Name)
	}
	kind := operatorListKind(dist)
	m, _ := d.Codec.(codec.Migrating[T])
	var reads func(codec.Identity) bool
	if m != nil {
		reads = m.Reads
	}
	from, err := b.schemas.register(StateSchema{Name: d.Name, Kind: kind, Codec: codec.IdentityOf(d.Codec)}, reads)
	if err != nil {
		return nil, err
	}
	s, ok := b.states[d.Name]
	if !ok {
		s = &opState{dist: dist}
		b.states[d.Name] = s
	} else if s.dist != dist {
		return nil, fmt.Errorf("state: operator list state %q exists with distribution %d, requested %d", d.Name, s.dist, dist)
	}
	if from != nil && ok {
		// Migrate the restored elements (into a new slice: a snapshot in
		// flight may hold the old one).
		elems := make([][]byte, len(s.elems))
		for i, e := range s.elems {
			v, err := m.DecodeFrom(from.Codec, e)
			if err != nil {
				return nil, fmt.Errorf("state: operator %s: migrating operator list state %q from %s: %w", b.schemas.operator, d.Name, from, err)
			}
			elems[i] = m.Append(nil, v)
		}
		s.elems = elems
	}
	return &OperatorListState[T]{s: s, c: d.Codec}, nil
}

// Add appends v.
func (l *OperatorListState[T]) Add(v T) error {
	l.s.elems = append(l.s.elems, l.c.Append(nil, v))
	return nil
}

// Update replaces the list with vs.
func (l *OperatorListState[T]) Update(vs []T) error {
	elems := make([][]byte, len(vs))
	for i, v := range vs {
		elems[i] = l.c.Append(nil, v)
	}
	l.s.elems = elems
	return nil
}

// Get decodes the list.
func (l *OperatorListState[T]) Get() ([]T, error) {
	out := make([]T, 0, len(l.s.elems))
	for _, e := range l.s.elems {
		v, err := l.c.Decode(e)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Len is the number of elements.
func (l *OperatorListState[T]) Len() int { return len(l.s.elems) }

// Clear empties the list.
func (l *OperatorListState[T]) Clear() { l.s.elems = nil }

// OperatorSnapshotFunc is the asynchronous part of an operator state
// snapshot; it returns nil when there is no state.
type OperatorSnapshotFunc func(ctx context.Context) (*OperatorStateHandle, error)

// The operator state file format: "WOS1" then, for each state sorted by
// name, its elements, each uvarint(len) | bytes. The handle records each
// element's offset per state; the whole file is covered by the storage CRC.
var operatorMagic = []byte("WOS1")

// Snapshot freezes the current lists (O(number of elements), pointer
// copies only) and returns the asynchronous part, which writes the file
// "operator" through w.
func (b *OperatorBackend) Snapshot(id barrier.CheckpointID, w StateWriterFactory) (OperatorSnapshotFunc, error) {
	type frozen struct {
		name  string
		dist  Distribution
		elems [][]byte
	}
	names := sortedKeys(b.states)
	snap := make([]frozen, 0, len(names))
	for _, n := range names {
		s := b.states[n]
		snap = append(snap, frozen{n, s.dist, slices.Clip(s.elems)})
	}
	return func(ctx context.Context) (*OperatorStateHandle, error) {
		if len(snap) == 0 {
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sw, err := w.CreateStateWriter(id, "operator")
		if err != nil {
			return nil, err
		}
		bw := bufio.NewWriter(sw)
		off := int64(len(operatorMagic))
		_, _ = bw.Write(operatorMagic)
		h := &OperatorStateHandle{States: make(map[string]OperatorStateMeta, len(snap))}
		var hdr []byte
		for _, f := range snap {
			offs := make([]int64, len(f.elems))
			for i, e := range f.elems {
				offs[i] = off
				hdr = binary.AppendUvarint(hdr[:0], uint64(len(e)))
				_, _ = bw.Write(hdr)
				_, _ = bw.Write(e)
				off += int64(len(hdr) + len(e))
			}
			h.States[f.name] = OperatorStateMeta{Distribution: f.dist, Offsets: offs}
		}
		if err := bw.Flush(); err != nil {
			_ = sw.Abort()
			return nil, err
		}
		if h.StreamHandle, err = sw.Close(); err != nil {
			_ = sw.Abort()
			return nil, err
		}
		return h, nil
	}, nil
}

// Restore replaces the backend's state with the state of all previous
// subtasks (handles, in previous subtask order; nil entries are skipped)
// redistributed for subtask index of parallelism: a split-distributed list
// gets its even share of the union of all elements, a union-distributed
// list gets the whole union, a broadcast-distributed list gets the list of
// previous subtask index mod len(handles). At an unchanged parallelism (one handle per
// subtask) a split-distributed list is the subtask's own, as it was
// snapshotted (Flink's round-robin repartitioner keeps the assignment too):
// what a subtask kept in order stays with it, in order.
func (b *OperatorBackend) Restore(handles []*OperatorStateHandle, r StateReader, index, parallelism int) error {
	if parallelism < 1 || index < 0 || index >= parallelism {
		return fmt.Errorf("state: restore operator state for subtask %d of %d", index, parallelism)
	}
	same := len(handles) == parallelism
	union := map[string]*opState{}
	for i, h := range handles {
		if h == nil || len(h.States) == 0 {
			continue
		}
		if err := readOperatorFile(h, r, union, !same || i == index, i == index%len(handles)); err != nil {
			return err
		}
	}
	b.states = make(map[string]*opState, len(union))
	for name, s := range union {
		if s.dist == SplitDistribute && !same {
			n := len(s.elems)
			lo, hi := index*n/parallelism, (index+1)*n/parallelism
			s.elems = slices.Clip(s.elems[lo:hi])
		}
		b.states[name] = s
	}
	return nil
}

// readOperatorFile adds the states of h to union; split-distributed
// elements only if split is set, broadcast-distributed ones only if
// broadcast is.
func readOperatorFile(h *OperatorStateHandle, r StateReader, union map[string]*opState, split, broadcast bool) (err error) {
	f, err := r.OpenState(h.StreamHandle)
	if err != nil {
		return err
	}
	defer f.Close()
	data := make([]byte, f.Size())
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("state: read %s: %w", h.Path, err)
	}
	if len(data) < len(operatorMagic) || string(data[:len(operatorMagic)]) != string(operatorMagic) {
		return &CorruptError{Path: h.Path, Reason: "bad operator state magic"}
	}
	names := make([]string, 0, len(h.States))
	for n := range h.States {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		meta := h.States[name]
		u, ok := union[name]
		if !ok {
			u = &opState{dist: meta.Distribution}
			union[name] = u
		} else if u.dist != meta.Distribution {
			return fmt.Errorf("state: operator state %q has distributions %d and %d in different subtasks", name, u.dist, meta.Distribution)
		}
		if u.dist == SplitDistribute && !split || u.dist == BroadcastDistribute && !broadcast {
			continue
		}
		for _, off := range meta.Offsets {
			if off < 0 || off >= int64(len(data)) {
				return &CorruptError{Path: h.Path, Reason: fmt.Sprintf("state %q: element offset %d outside file", name, off)}
			}
			e, _, err := splitFramed(data[off:])
			if err != nil {
				return &CorruptError{Path: h.Path, Reason: fmt.Sprintf("state %q at offset %d", name, off), Err: err}
			}
			u.elems = append(u.elems, e)
		}
	}
	return nil
}
