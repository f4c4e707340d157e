package join

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/state"
)

// ErrBroadcastReadOnly is returned by a write to a broadcast state outside
// the broadcast side's processing: only the broadcast input writes the
// broadcast state, so that every subtask holds the same.
var ErrBroadcastReadOnly = errors.New("join: the broadcast state is read-only here: only the broadcast side writes it")

// ErrNoCurrentKey is returned by a keyed broadcast operator's timer
// registration while it processes a broadcast element: that element
// belongs to no key.
var ErrNoCurrentKey = errors.New("join: no current key on the broadcast side")

// BroadcastStates are one subtask's broadcast states (Flink's
// BroadcastState): maps by name, of encoded keys to encoded values, that
// the broadcast input writes and the other input reads. Every subtask
// receives every broadcast element, so all hold the same maps; a snapshot
// keeps the subtask's copy, and a restore at any parallelism gives new
// subtask i the copy of old subtask i mod the old parallelism
// (state.BroadcastDistribute). Writes are allowed only while Writable.
type BroadcastStates struct {
	maps     map[string]*BroadcastMap
	writable bool
}

// BroadcastState names one broadcast state and the codecs of its keys and
// values, whose identities its schema records: a restore that declares
// other codecs for it is refused (state.SchemaError).
type BroadcastState struct {
	Name       string
	Key, Value any // codecs
}

// entriesCodec is the codec of the elements of the operator list state
// that holds a broadcast state of key and value codecs kc, vc: their
// identities named, the entries' framing is the core's.
func entriesCodec(kc, vc any) codec.Codec[[]byte] {
	return codec.WithIdentity(codec.Bytes(), codec.FormatIdentity("broadcast-map", kc, vc))
}

// NewBroadcastStates returns an empty set of broadcast states.
func NewBroadcastStates() *BroadcastStates { return &BroadcastStates{maps: map[string]*BroadcastMap{}} }

// SetWritable allows writes (the broadcast side runs) or forbids them.
func (s *BroadcastStates) SetWritable(on bool) { s.writable = on }

// Writable reports whether writes are allowed now.
func (s *BroadcastStates) Writable() bool { return s.writable }

// Map returns the broadcast state called name, creating it empty.
func (s *BroadcastStates) Map(name string) *BroadcastMap {
	m := s.maps[name]
	if m == nil {
		m = &BroadcastMap{owner: s, entries: map[string][]byte{}, codec: codec.Bytes()}
		s.maps[name] = m
	}
	return m
}

// Names lists the broadcast states, in bytewise order.
func (s *BroadcastStates) Names() []string {
	names := make([]string, 0, len(s.maps))
	for n := range s.maps {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// broadcastStatePrefix names the operator list state that holds broadcast
// state name in a snapshot.
const broadcastStatePrefix = "_broadcast/"

// Snapshot writes every map into b, each as the broadcast-distributed
// operator list state "_broadcast/<name>" of its entries (uvarint(len(key))
// | key | value), in key order; b then snapshots with the operator.
func (s *BroadcastStates) Snapshot(b *state.OperatorBackend) error {
	for _, name := range s.Names() {
		m := s.maps[name]
		l, err := state.GetOperatorListState(b, state.ListDescriptor[[]byte]{Name: broadcastStatePrefix + name, Codec: m.codec}, state.BroadcastDistribute)
		if err != nil {
			return err
		}
		elems := make([][]byte, 0, len(m.entries))
		for _, k := range m.Keys() {
			e := binary.AppendUvarint(nil, uint64(len(k)))
			e = append(append(e, k...), m.entries[k]...)
			elems = append(elems, e)
		}
		if err := l.Update(elems); err != nil {
			return err
		}
	}
	return nil
}

// Restore replaces the maps with those b holds (b restored already, for
// this subtask: the copy of its old subtask), checking each listed state's
// schema against the one it was restored with. A listed state b does not
// hold is an empty map; states b holds but not listed are restored too,
// and kept under the schema they were restored with.
func (s *BroadcastStates) Restore(b *state.OperatorBackend, states []BroadcastState) error {
	s.maps = map[string]*BroadcastMap{}
	codecs := map[string]codec.Codec[[]byte]{}
	var names []string
	for _, st := range states {
		names = append(names, st.Name)
		codecs[st.Name] = entriesCodec(st.Key, st.Value)
	}
	for _, n := range b.Names() {
		if name, ok := bytes.CutPrefix([]byte(n), []byte(broadcastStatePrefix)); ok {
			names = append(names, string(name))
		}
	}
	for _, name := range names {
		if s.maps[name] != nil {
			continue
		}
		m := s.Map(name)
		if c, ok := codecs[name]; ok {
			m.codec = c
		} else if r, ok := b.StateSchemas().Restored(broadcastStatePrefix + name); ok {
			m.codec = codec.WithIdentity(codec.Bytes(), r.Codec)
		}
		l, err := state.GetOperatorListState(b, state.ListDescriptor[[]byte]{Name: broadcastStatePrefix + name, Codec: m.codec}, state.BroadcastDistribute)
		if err != nil {
			return err
		}
		elems, err := l.Get()
		if err != nil {
			return err
		}
		for _, e := range elems {
			n, w := binary.Uvarint(e)
			if w <= 0 || uint64(len(e)-w) < n {
				return fmt.Errorf("%w: broadcast state %q: an entry of %d bytes", state.ErrCorruptState, name, len(e))
			}
			m.entries[string(e[w:w+int(n)])] = e[w+int(n):]
		}
	}
	return nil
}

// BroadcastMap is one broadcast state: encoded keys to encoded values.
type BroadcastMap struct {
	owner   *BroadcastStates
	entries map[string][]byte
	keys    []string // sorted; nil when stale
	// codec is that of the operator list state's elements (entriesCodec).
	codec codec.Codec[[]byte]
}

// Get returns the value of key.
func (m *BroadcastMap) Get(key []byte) ([]byte, bool) {
	v, ok := m.entries[string(key)]
	return v, ok
}

// Put sets the value of key (both copied). It fails with
// ErrBroadcastReadOnly unless the states are writable.
func (m *BroadcastMap) Put(key, value []byte) error {
	if !m.owner.writable {
		return ErrBroadcastReadOnly
	}
	k := string(key)
	if _, ok := m.entries[k]; !ok {
		m.keys = nil
	}
	m.entries[k] = slices.Clone(value)
	return nil
}

// Delete removes key; it fails with ErrBroadcastReadOnly unless the states
// are writable.
func (m *BroadcastMap) Delete(key []byte) error {
	if !m.owner.writable {
		return ErrBroadcastReadOnly
	}
	if _, ok := m.entries[string(key)]; ok {
		delete(m.entries, string(key))
		m.keys = nil
	}
	return nil
}

// Clear removes every entry; it fails with ErrBroadcastReadOnly unless the
// states are writable.
func (m *BroadcastMap) Clear() error {
	if !m.owner.writable {
		return ErrBroadcastReadOnly
	}
	clear(m.entries)
	m.keys = nil
	return nil
}

// Len is the number of entries.
func (m *BroadcastMap) Len() int { return len(m.entries) }

// Keys returns the keys in bytewise order; the slice is the map's, valid
// until the next write.
func (m *BroadcastMap) Keys() []string {
	if m.keys == nil {
		m.keys = make([]string, 0, len(m.entries))
		for k := range m.entries {
			m.keys = append(m.keys, k)
		}
		slices.Sort(m.keys)
	}
	return m.keys
}

// KeyedBroadcast is the core of a keyed operator whose second input is
// broadcast (Flink's CoBroadcastWithKeyedOperator): the broadcast side
// writes the broadcast states, the keyed side reads them and has keyed
// state and event-time timers, and a firing timer reads them too. It owns
// no goroutine and reads no clock: elements, watermarks and snapshots are
// method calls; what the user function does is the caller's callbacks.
//
// The caller's duties, in order:
//
//  1. Restore the keyed and operator backends (or leave them empty), then
//     NewKeyedBroadcast with the broadcast states.
//  2. For an element of the keyed side, ProcessElement with its key: fn
//     runs with the key current and the broadcast states read-only.
//  3. For a broadcast element, ProcessBroadcast: fn runs with the states
//     writable and no key (timers cannot be set).
//  4. For a rise of the operator's watermark, AdvanceWatermark (the task's
//     combination of the inputs), or ProcessWatermark with each input's
//     watermark (the two combined by their minimum, without idleness):
//     due timers fire, in (time, key) order, before the watermark goes
//     on.
//  5. Before the backends snapshot, PrepareSnapshot.
type KeyedBroadcast struct {
	States *BroadcastStates
	keyed  state.KeyedBackend
	oper   *state.OperatorBackend
	timers *eventtime.TimerService
	w      [2]int64
	wm     int64
	// broadcasting: a broadcast element is being processed.
	broadcasting bool
}

// NewKeyedBroadcast returns the core over the (restored) backends, with
// the broadcast states states (and any other the operator backend holds).
func NewKeyedBroadcast(keyed state.KeyedBackend, oper *state.OperatorBackend, states []BroadcastState) (*KeyedBroadcast, error) {
	timers, err := eventtime.NewTimerService(keyed, "broadcast")
	if err != nil {
		return nil, err
	}
	o := &KeyedBroadcast{States: NewBroadcastStates(), keyed: keyed, oper: oper, timers: timers,
		w: [2]int64{eventtime.MinWatermark, eventtime.MinWatermark}, wm: eventtime.MinWatermark}
	if err := o.States.Restore(oper, states); err != nil {
		return nil, err
	}
	return o, nil
}

// Timers is the operator's timer service (for processing-time timers and
// the current watermark); RegisterEventTimeTimer registers event-time
// timers checked for a current key.
func (o *KeyedBroadcast) Timers() *eventtime.TimerService { return o.timers }

// Watermark is the operator's event time.
func (o *KeyedBroadcast) Watermark() int64 { return o.wm }

// ProcessElement runs fn for an element of the keyed side with key (its
// key group group) current and the broadcast states read-only.
func (o *KeyedBroadcast) ProcessElement(key []byte, group int, fn func() error) error {
	o.keyed.SetCurrentKey(key, group)
	o.States.SetWritable(false)
	return fn()
}

// ProcessBroadcast runs fn for a broadcast element, the broadcast states
// writable.
func (o *KeyedBroadcast) ProcessBroadcast(fn func() error) error {
	o.States.SetWritable(true)
	o.broadcasting = true
	defer func() {
		o.States.SetWritable(false)
		o.broadcasting = false
	}()
	return fn()
}

// Broadcasting reports whether a broadcast element is being processed
// (ProcessBroadcast's fn runs).
func (o *KeyedBroadcast) Broadcasting() bool { return o.broadcasting }

// RegisterEventTimeTimer sets an event-time timer at ts for the current
// key; ErrNoCurrentKey on the broadcast side. A timer at or behind the
// watermark fires at its next rise.
func (o *KeyedBroadcast) RegisterEventTimeTimer(ts int64) error {
	if o.broadcasting {
		return ErrNoCurrentKey
	}
	return o.timers.RegisterEventTimeTimer(ts, nil)
}

// ProcessWatermark takes input's watermark ts (input 0 is the keyed side,
// 1 the broadcast side; an input never goes back) and, when the minimum of
// the two rises, advances the operator to it; it reports the new
// watermark.
func (o *KeyedBroadcast) ProcessWatermark(input int, ts int64, fire eventtime.TimerFunc) (wm int64, rose bool, err error) {
	o.w[input] = max(o.w[input], ts)
	m := min(o.w[0], o.w[1])
	if m <= o.wm {
		return 0, false, nil
	}
	return m, true, o.AdvanceWatermark(m, fire)
}

// AdvanceWatermark moves the operator's event time to wm: every timer at
// or before it fires, in (time, key) order, with its key current.
func (o *KeyedBroadcast) AdvanceWatermark(wm int64, fire eventtime.TimerFunc) error {
	o.wm = max(o.wm, wm)
	o.States.SetWritable(false)
	return o.timers.AdvanceWatermark(wm, fire)
}

// ForEachKey calls fn, with each key current, for every key (and its key
// group) that has keyed state called name in this subtask (Flink's
// applyToKeyedState); fn may read and write the key's state. A state
// never registered has no keys.
func (o *KeyedBroadcast) ForEachKey(name string, fn func(key []byte, group int) error) error {
	var id state.StateID
	found := false
	for _, m := range o.keyed.States() {
		if m.Name == name {
			sid, err := o.keyed.Register(name, m.Kind)
			if err != nil {
				return err
			}
			id, found = sid, true
		}
	}
	if !found {
		return nil
	}
	type keyOf struct {
		key   string
		group int
	}
	var keys []keyOf
	seen := map[string]bool{}
	err := o.keyed.Entries(id, func(key []byte, group int, _, _ []byte) bool {
		if !seen[string(key)] {
			seen[string(key)] = true
			keys = append(keys, keyOf{string(key), group})
		}
		return true
	})
	if err != nil {
		return err
	}
	slices.SortFunc(keys, func(a, b keyOf) int { return bytes.Compare([]byte(a.key), []byte(b.key)) })
	for _, k := range keys {
		o.keyed.SetCurrentKey([]byte(k.key), k.group)
		if err := fn([]byte(k.key), k.group); err != nil {
			return err
		}
	}
	return nil
}

// PrepareSnapshot writes the timers into the keyed backend and the
// broadcast states into the operator backend, which snapshot next.
func (o *KeyedBroadcast) PrepareSnapshot() error {
	if err := o.timers.Flush(); err != nil {
		return err
	}
	return o.States.Snapshot(o.oper)
}
