package eventtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// TimerDomain says which clock a timer follows.
type TimerDomain uint8

const (
	// TimerEventTime timers fire when the watermark reaches them.
	TimerEventTime TimerDomain = iota
	// TimerProcessingTime timers fire when processing time reaches them.
	TimerProcessingTime
)

func (d TimerDomain) String() string {
	switch d {
	case TimerEventTime:
		return "event-time"
	case TimerProcessingTime:
		return "processing-time"
	}
	return fmt.Sprintf("TimerDomain(%d)", uint8(d))
}

// Timer is one timer: a timestamp (ms) for a record key in a namespace.
// Key is the serialized record key and KeyGroup its key group; Namespace is
// opaque to the timer service (a window operator puts its window there, a
// process function nothing).
//
// Timers are a set: two timers are the same when their timestamp, key and
// namespace are equal. They fire in the order (Timestamp, Key bytewise,
// Namespace bytewise).
type Timer struct {
	Timestamp int64
	Key       []byte
	KeyGroup  int
	Namespace []byte
}

// TimerFunc is called for each timer that fires. The backend's current key
// is the timer's key when it is called. The timer's slices are owned by the
// service and valid only during the call. A non-nil error stops the firing
// and is returned by the Advance method (the timer is gone either way).
type TimerFunc func(t Timer) error

// TimerService holds the event-time and processing-time timers of one keyed
// operator (Flink's InternalTimerService). It is a pure core: time moves
// only through AdvanceWatermark and AdvanceProcessingTime, and it starts no
// goroutine.
//
// The timers are in memory (Flink's heap priority queue set): per record
// key the set of its timers, which registering checks so that duplicates
// never enter, and per domain a queue over them (timerQueue: the timers
// registered since it last had to be ordered, sorted at once into a run
// when the earliest may be among them, and a few sorted runs). A deleted
// timer stays queued until it comes to the front or the queue holds more
// deleted entries than timers (it is then filtered).
//
// They are keyed state all the same: Flush writes what changed since the
// previous Flush into the operator's state.KeyedBackend, in two map states
// named "_timers/<name>/event" and "_timers/<name>/processing", under the
// timer's record key with the user key
//
//	timestamp (8 bytes, big endian, sign bit flipped) | namespace
//
// and an empty value, so that they are checkpointed with the keyed state
// and move with their key group when a job is rescaled. The operator calls
// Flush when it snapshots its state, before the backend's snapshot. A timer
// registered and fired between two snapshots never reaches the backend.
//
// NewTimerService rebuilds the set and both queues from what the backend
// holds, which is how timers are restored: restore the backend first, then
// create the service.
//
// A TimerService is used from one goroutine (the task's), like its backend.
type TimerService struct {
	b    state.KeyedBackend
	q    [2]timerQueue
	keys timerKeyTable // keys with timers or queue entries

	// dirty lists the keys with timers to write to the backend or to
	// remove from it at the next Flush; a key that left keys since may
	// still be listed (Flush and pruneDirty skip it).
	dirty []*timerKey

	watermark int64
	procTime  int64
	firing    bool

	touched int // what timerQueue.touch returned, kept so that its reads stay

	ubuf []byte // user key of a timer written or removed by Flush
	fbuf []byte // user key of the timer being fired
	cbuf []byte // the backend's current key, kept across Flush

	// The key and namespace of the latest registration, reused when the
	// next one has the same (a window operator registers several timers
	// per element, for one key and window).
	lastKey *timerKey
	lastNS  string
}

// timerKey is an interned record key: its timers, and the queue entries
// (of both domains, stale ones included) that point to it (refs). With no
// timer and no entry left it leaves the intern table.
//
// It is 128 bytes, the key (up to 16 bytes) and the first two slots
// included, so that it fills two cache lines exactly (its allocation size
// class is aligned to 128): registering a timer and firing one read it
// with one cache miss, and follow no pointer to the key or the slots.
type timerKey struct {
	// kb holds the key's first 16 bytes, zero-padded; long the whole key
	// (klen bytes) when it is longer.
	kb    [16]byte
	long  *byte
	klen  int32
	group int32
	refs  int32
	// The key's live timers and the deleted or fired ones still in the
	// backend are in slots (slot(i), i < n): inl, then more's. A slot
	// stays a timer's while it is in use, so that a queue entry finds its
	// timer without a search. Freed slots are chained from free for
	// reuse, and all are dropped once none is used.
	used     int32 // slots in use
	free     int32 // 1 + the first free slot; 0 if none
	n        int32 // slots
	interned bool  // in keys (a released key stays listed in dirty)
	dirty    bool  // listed in TimerService.dirty
	inl      [2]keyTimer
	more     *timerMore
}

// timerMore holds the slots of a key with more than two, and the index
// that finds its timers when there are many (nil until then).
type timerMore struct {
	timers []keyTimer // slots 2, 3, ...
	index  *timerIndex
}

// newTimerKey returns the record of key, in key group group.
func newTimerKey(key []byte, group int) *timerKey {
	k := &timerKey{klen: int32(len(key)), group: int32(group)}
	copy(k.kb[:], key)
	if len(key) > len(k.kb) {
		k.long = &bytes.Clone(key)[0]
	}
	return k
}

// key returns the record key (aliasing k).
func (k *timerKey) key() []byte {
	if k.long != nil {
		return unsafe.Slice(k.long, k.klen)
	}
	return k.kb[:k.klen:k.klen]
}

// prefix returns the key's timerPrefix.
func (k *timerKey) prefix() timerPrefix {
	return timerPrefix{binary.BigEndian.Uint64(k.kb[:8]), binary.BigEndian.Uint64(k.kb[8:])}
}

// slot returns slot i (< k.n).
func (k *timerKey) slot(i int) *keyTimer {
	if i < len(k.inl) {
		return &k.inl[i]
	}
	return &k.more.timers[i-len(k.inl)]
}

// index returns the key's timer index, nil if none.
func (k *timerKey) index() *timerIndex {
	if k.more == nil {
		return nil
	}
	return k.more.index
}

// keyTimerID identifies one of a key's timers.
type keyTimerID struct {
	ts int64
	ns string
	d  TimerDomain
}

// keyTimer is one of a key's timers: live (registered, not yet fired or
// deleted) and/or stored (in the backend as of the last Flush); a slot
// that is neither is free, and its ts holds the next free slot (as
// timerKey.free does). It is keyTimerID's fields and the flags in 32 bytes
// (embedding keyTimerID would pad it to 40): a key's record with its first
// two timers fits in fewer cache lines.
type keyTimer struct {
	ts           int64
	ns           string
	d            TimerDomain
	live, stored bool
}

func (t *keyTimer) id() keyTimerID { return keyTimerID{ts: t.ts, ns: t.ns, d: t.d} }

// is reports whether slot t holds the timer id.
func (t *keyTimer) is(id keyTimerID) bool {
	return (t.live || t.stored) && t.ts == id.ts && t.d == id.d && t.ns == id.ns
}

// keyTimerIndexMin is the number of timers of one key from which they are
// found through a map rather than by a scan.
const keyTimerIndexMin = 16

// timerIndex finds the timers of a key that has many: by timestamp, and
// those whose timestamp another of the key's timers has (in another
// namespace or domain) by their whole identity. A timestamp hashes much
// faster than a keyTimerID (three hashes, one of them of a string), and a
// key's timers seldom share one. It may name slots freed since (removing
// a timer leaves it be): lookups check the slot.
type timerIndex struct {
	byTs   map[int64]int32
	others map[keyTimerID]int32
}

// find returns the slot of timer id, or -1.
func (k *timerKey) find(id keyTimerID) int {
	if x := k.index(); x != nil {
		if i, ok := x.byTs[id.ts]; ok && k.slot(int(i)).is(id) {
			return int(i)
		}
		if i, ok := x.others[id]; ok && k.slot(int(i)).is(id) {
			return int(i)
		}
		return -1
	}
	for i := range int(k.n) {
		if k.slot(i).is(id) {
			return i
		}
	}
	return -1
}

// add puts t in a free slot and returns the slot.
func (k *timerKey) add(t keyTimer) int {
	i := int(k.n)
	switch {
	case k.free > 0:
		i = int(k.free - 1)
		s := k.slot(i)
		k.free = int32(s.ts)
		*s = t
	case i < len(k.inl):
		k.inl[i] = t
		k.n++
	default:
		if k.more == nil {
			k.more = &timerMore{}
		}
		k.more.timers = append(k.more.timers, t)
		k.n++
	}
	k.used++
	x := k.index()
	switch {
	case x == nil && k.used <= keyTimerIndexMin:
	case x == nil || len(x.byTs)+len(x.others) >= 2*int(k.used)+keyTimerIndexMin:
		// Build the index, or rebuild it without the entries of freed
		// slots once they are as many as the timers.
		if x == nil {
			x = &timerIndex{byTs: make(map[int64]int32, 2*k.used)}
			k.more.index = x // more than keyTimerIndexMin timers: k.more is set
		}
		clear(x.byTs)
		clear(x.others)
		for j := range int(k.n) {
			if t := k.slot(j); t.live || t.stored {
				x.add(k, j)
			}
		}
	default:
		x.add(k, i)
	}
	return i
}

// add indexes slot i of k.
func (x *timerIndex) add(k *timerKey, i int) {
	t := k.slot(i)
	if j, ok := x.byTs[t.ts]; ok && int(j) != i {
		if o := k.slot(int(j)); (o.live || o.stored) && o.ts == t.ts {
			if x.others == nil {
				x.others = map[keyTimerID]int32{}
			}
			x.others[t.id()] = int32(i)
			return
		}
	}
	x.byTs[t.ts] = int32(i)
}

// remove frees slot i; the last timer leaving drops all slots.
func (k *timerKey) remove(i int) {
	k.used--
	if k.used == 0 {
		k.inl = [2]keyTimer{}
		if m := k.more; m != nil {
			clear(m.timers)
			m.timers, m.index = m.timers[:0], nil
		}
		k.n, k.free = 0, 0
		return
	}
	*k.slot(i) = keyTimer{ts: int64(k.free)}
	k.free = int32(i + 1)
}

// timerPrefix holds the first 16 bytes of a key, zero-padded, as two big
// endian integers: comparing two prefixes orders keys bytewise, except
// that equal prefixes need a comparison of the whole keys.
type timerPrefix struct{ hi, lo uint64 }

// timerUserKeyLen is the length of the timestamp prefix of a timer's user
// key.
const timerUserKeyLen = 8

// timerFormat names the layout of the timers in the backend: user key
// timestamp | namespace, no value (see timerUserKeyLen).
var timerFormat = codec.Identity{Name: "timers", Version: "1"}

// timerCompactMin is the number of stale entries below which a queue is
// never rebuilt.
const timerCompactMin = 64

// NewTimerService returns the timer service called name (empty means
// "default") of the keyed operator whose state is in b, with the timers b
// holds (after a restore: those of b's key groups). The watermark and
// processing time start at math.MinInt64.
func NewTimerService(b state.KeyedBackend, name string) (*TimerService, error) {
	if b == nil {
		return nil, errors.New("eventtime: timer service without a keyed backend")
	}
	if name == "" {
		name = "default"
	}
	if strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("eventtime: timer service name %q contains '/'", name)
	}
	s := &TimerService{
		b:         b,
		keys:      newTimerKeyTable(),
		watermark: math.MinInt64,
		procTime:  math.MinInt64,
	}
	for d, suffix := range [2]string{"event", "processing"} {
		id, err := state.RegisterStateFormat(b, "_timers/"+name+"/"+suffix, state.KindMap, timerFormat)
		if err != nil {
			return nil, fmt.Errorf("eventtime: timer service %q: %w", name, err)
		}
		q := &s.q[d]
		q.id = id
		var derr error
		err = b.Entries(id, func(key []byte, keyGroup int, userKey, _ []byte) bool {
			if len(userKey) < timerUserKeyLen {
				derr = fmt.Errorf("%w: timer user key of %d bytes", state.ErrCorruptState, len(userKey))
				return false
			}
			k := s.intern(key, keyGroup)
			t := keyTimer{ts: timerDecodeTimestamp(userKey), ns: string(userKey[timerUserKeyLen:]), d: TimerDomain(d), live: true, stored: true}
			if k.find(t.id()) >= 0 {
				derr = fmt.Errorf("%w: timer at %d of key %q twice", state.ErrCorruptState, t.ts, key)
				return false
			}
			s.enqueue(q, k, k.add(t), t.ts, t.ns)
			q.live++
			return true
		})
		if err == nil {
			err = derr
		}
		if err != nil {
			return nil, fmt.Errorf("eventtime: restoring timer service %q: %w", name, err)
		}
	}
	return s, nil
}

// CurrentWatermark returns the watermark of the latest AdvanceWatermark
// (math.MinInt64 before the first).
func (s *TimerService) CurrentWatermark() int64 { return s.watermark }

// CurrentProcessingTime returns the time of the latest
// AdvanceProcessingTime (math.MinInt64 before the first).
func (s *TimerService) CurrentProcessingTime() int64 { return s.procTime }

// RegisterEventTimeTimer registers an event-time timer at ts for the
// backend's current key in namespace ns. Registering an existing timer does
// nothing. A timer at or before the current watermark fires at the next
// AdvanceWatermark (or in the running one, when called from a TimerFunc).
func (s *TimerService) RegisterEventTimeTimer(ts int64, ns []byte) error {
	return s.register(TimerEventTime, ts, ns)
}

// RegisterProcessingTimeTimer registers a processing-time timer at ts for
// the backend's current key in namespace ns (see RegisterEventTimeTimer).
func (s *TimerService) RegisterProcessingTimeTimer(ts int64, ns []byte) error {
	return s.register(TimerProcessingTime, ts, ns)
}

// DeleteEventTimeTimer deletes the event-time timer at ts of the backend's
// current key in namespace ns. Deleting a missing timer does nothing.
func (s *TimerService) DeleteEventTimeTimer(ts int64, ns []byte) error {
	return s.delete(TimerEventTime, ts, ns)
}

// DeleteProcessingTimeTimer deletes the processing-time timer at ts of the
// backend's current key in namespace ns (see DeleteEventTimeTimer).
func (s *TimerService) DeleteProcessingTimeTimer(ts int64, ns []byte) error {
	return s.delete(TimerProcessingTime, ts, ns)
}

// AdvanceWatermark sets the current watermark to wm, then fires, in timer
// order, every event-time timer with timestamp ≤ wm, removing each before
// calling fire with the backend's current key set to the timer's key.
// Timers that fire registers take part at once if they are due. It must not
// be called from a TimerFunc.
func (s *TimerService) AdvanceWatermark(wm int64, fire TimerFunc) error {
	if s.firing {
		return errors.New("eventtime: AdvanceWatermark called while timers fire")
	}
	s.watermark = wm
	return s.advance(TimerEventTime, wm, fire)
}

// AdvanceProcessingTime sets the current processing time to now, then fires
// every processing-time timer with timestamp ≤ now, like AdvanceWatermark.
func (s *TimerService) AdvanceProcessingTime(now int64, fire TimerFunc) error {
	if s.firing {
		return errors.New("eventtime: AdvanceProcessingTime called while timers fire")
	}
	s.procTime = now
	return s.advance(TimerProcessingTime, now, fire)
}

// NextProcessingTime returns the timestamp of the earliest processing-time
// timer, if any: the driver calls AdvanceProcessingTime once its clock
// reaches it.
func (s *TimerService) NextProcessingTime() (int64, bool) {
	return s.next(TimerProcessingTime)
}

// NextEventTime returns the timestamp of the earliest event-time timer, if
// any.
func (s *TimerService) NextEventTime() (int64, bool) {
	return s.next(TimerEventTime)
}

// NumTimers returns the number of timers of domain d.
func (s *TimerService) NumTimers(d TimerDomain) int {
	if d > TimerProcessingTime {
		return 0
	}
	return s.q[d].live
}

// Flush writes the timers registered since the previous Flush to the
// backend and removes from it those fired or deleted since, so that the
// backend holds exactly the live timers. Call it before snapshotting the
// backend. It leaves the backend's current key as it found it.
func (s *TimerService) Flush() error {
	if len(s.dirty) == 0 {
		return nil
	}
	key, group := s.b.CurrentKey()
	s.cbuf = append(s.cbuf[:0], key...)
	err := s.flush()
	if group >= 0 {
		err = errors.Join(err, s.b.SetCurrentKey(s.cbuf, group))
	}
	return err
}

func (s *TimerService) flush() error {
	for n, k := range s.dirty {
		s.dirty[n] = nil
		if !k.dirty {
			continue
		}
		k.dirty = false
		if err := s.flushKey(k); err != nil {
			// k and the keys after it stay to be flushed.
			s.dirty = s.dirty[n:]
			k.dirty = true
			s.dirty[0] = k
			return err
		}
		s.release(k)
	}
	s.dirty = s.dirty[:0]
	return nil
}

// flushKey writes k's new timers to the backend and removes its ended
// ones from it.
func (s *TimerService) flushKey(k *timerKey) error {
	set := false
	// Forward: removing the last timer drops all slots.
	for i := 0; i < int(k.n); i++ {
		t := k.slot(i)
		if t.live == t.stored {
			continue
		}
		if !set {
			if err := s.b.SetCurrentKey(k.key(), int(k.group)); err != nil {
				return err
			}
			set = true
		}
		s.ubuf = timerAppendUserKey(s.ubuf[:0], t.ts, t.ns)
		id := s.q[t.d].id
		if t.live {
			if err := s.b.Put(id, s.ubuf, nil); err != nil {
				return err
			}
			t.stored = true
			continue
		}
		if err := s.b.Delete(id, s.ubuf); err != nil {
			return err
		}
		k.remove(i)
	}
	return nil
}

func (s *TimerService) markDirty(k *timerKey) {
	if k.dirty {
		return
	}
	k.dirty = true
	if len(s.dirty) >= 2*s.keys.len()+1024 {
		s.pruneDirty() // no Flush for a while (a job without checkpoints)
	}
	s.dirty = append(s.dirty, k)
}

// pruneDirty drops from the dirty list the keys that left the intern
// table: nothing of theirs is to be written any more.
func (s *TimerService) pruneDirty() {
	kept := s.dirty[:0]
	for _, k := range s.dirty {
		if k.dirty && k.interned {
			kept = append(kept, k)
		} else {
			k.dirty = false
		}
	}
	clear(s.dirty[len(kept):])
	s.dirty = kept
}

// RegisterTimerFor registers a timer of domain d at ts for record key key
// (in key group group) in namespace ns, whatever the backend's current
// key: a caller that knows the key saves switching the backend to it.
// Otherwise it is RegisterEventTimeTimer or RegisterProcessingTimeTimer.
func (s *TimerService) RegisterTimerFor(d TimerDomain, key []byte, group int, ts int64, ns []byte) error {
	if d > TimerProcessingTime {
		return fmt.Errorf("eventtime: unknown timer domain %d", d)
	}
	if group < 0 {
		return fmt.Errorf("eventtime: %s timer registered without a key group", d)
	}
	return s.registerFor(d, key, group, ts, ns)
}

func (s *TimerService) register(d TimerDomain, ts int64, ns []byte) error {
	key, group := s.b.CurrentKey()
	if group < 0 {
		return fmt.Errorf("eventtime: %s timer registered without a current key", d)
	}
	return s.registerFor(d, key, group, ts, ns)
}

func (s *TimerService) registerFor(d TimerDomain, key []byte, group int, ts int64, ns []byte) error {
	k := s.intern(key, group)
	if string(ns) != s.lastNS {
		s.lastNS = string(ns)
	}
	i := k.find(keyTimerID{ts: ts, ns: s.lastNS, d: d})
	if i >= 0 {
		t := k.slot(i)
		if t.live {
			return nil
		}
		t.live = true // deleted or fired, still in the backend
	} else {
		i = k.add(keyTimer{ts: ts, ns: s.lastNS, d: d, live: true})
		s.markDirty(k)
	}
	q := &s.q[d]
	s.enqueue(q, k, i, ts, s.lastNS)
	q.live++
	return nil
}

func (s *TimerService) delete(d TimerDomain, ts int64, ns []byte) error {
	key, group := s.b.CurrentKey()
	if group < 0 {
		return fmt.Errorf("eventtime: %s timer deleted without a current key", d)
	}
	k := s.keys.find(s.keys.hash(key), key)
	if k == nil {
		return nil
	}
	i := k.find(keyTimerID{ts: ts, ns: string(ns), d: d})
	if i < 0 || !k.slot(i).live {
		return nil
	}
	s.kill(k, i)
	q := &s.q[d]
	q.live--
	if stale := q.len() - q.live; stale > timerCompactMin && stale > q.live {
		s.compact(d)
	}
	return nil
}

// kill ends timer i of k (fired or deleted): it stays, for Flush to remove
// from the backend, if it is there.
func (s *TimerService) kill(k *timerKey, i int) {
	if t := k.slot(i); t.stored {
		t.live = false
		s.markDirty(k)
		return
	}
	k.remove(i)
}

// enqueue queues timer (ts, ns) of k, in slot i.
func (s *TimerService) enqueue(q *timerQueue, k *timerKey, i int, ts int64, ns string) {
	k.refs++
	q.push(timerEntry{ts: ts, prefix: k.prefix(), k: k, ns: ns, slot: int32(i)})
}

// live reports whether the timer of queue entry it, of domain d, is live:
// the entry is stale if its timer was deleted or fired already (its slot
// is free, holds another timer, or is gone with all of the key's).
func (s *TimerService) live(d TimerDomain, it timerEntry) bool {
	if it.slot >= it.k.n {
		return false
	}
	t := it.k.slot(int(it.slot))
	return t.live && t.ts == it.ts && t.d == d && t.ns == it.ns
}

func (s *TimerService) advance(d TimerDomain, t int64, fire TimerFunc) error {
	q := &s.q[d]
	s.firing = true
	defer func() { s.firing = false }()
	for n := 0; ; n++ {
		if ts, ok := q.minTimestamp(); !ok || ts > t {
			return nil
		}
		if n%timerTouchBatch == 0 {
			s.touched += q.touch(timerTouchBatch)
		}
		it := q.take()
		k := it.k
		if !s.live(d, it) {
			k.refs--
			s.release(k)
			continue
		}
		s.kill(k, int(it.slot))
		q.live--
		key := k.key()
		if err := s.b.SetCurrentKey(key, int(k.group)); err != nil {
			k.refs--
			s.release(k)
			return err
		}
		s.fbuf = timerAppendUserKey(s.fbuf[:0], it.ts, it.ns)
		err := fire(Timer{Timestamp: it.ts, Key: key, KeyGroup: int(k.group), Namespace: s.fbuf[timerUserKeyLen:]})
		k.refs--
		s.release(k)
		if err != nil {
			return err
		}
	}
}

func (s *TimerService) next(d TimerDomain) (int64, bool) {
	q := &s.q[d]
	if q.len() == q.live {
		return q.minTimestamp()
	}
	return q.firstLive(func(it timerEntry) bool {
		if s.live(d, it) {
			return false
		}
		it.k.refs--
		s.release(it.k)
		return true
	})
}

// compact drops the stale entries of domain d's queue.
func (s *TimerService) compact(d TimerDomain) {
	q := &s.q[d]
	q.filter(func(it timerEntry) bool {
		if s.live(d, it) {
			return true
		}
		it.k.refs--
		s.release(it.k)
		return false
	})
}

func (s *TimerService) intern(key []byte, group int) *timerKey {
	// lastKey is nil once released.
	if k := s.lastKey; k != nil && bytes.Equal(k.key(), key) {
		return k
	}
	h := s.keys.hash(key)
	k := s.keys.find(h, key)
	if k == nil {
		k = newTimerKey(key, group)
		k.interned = true
		s.keys.insert(h, k)
	}
	s.lastKey = k
	return k
}

// release drops k from the intern table once nothing refers to it.
func (s *TimerService) release(k *timerKey) {
	if k.refs == 0 && k.used == 0 && k.interned {
		s.keys.remove(s.keys.hash(k.key()), k)
		k.interned = false
		if s.lastKey == k {
			s.lastKey = nil
		}
	}
}

// timerAppendUserKey appends the user key of the timer (ts, ns).
func timerAppendUserKey[NS ~string | ~[]byte](dst []byte, ts int64, ns NS) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts)^(1<<63))
	return append(dst, ns...)
}

func timerDecodeTimestamp(userKey []byte) int64 {
	return int64(binary.BigEndian.Uint64(userKey) ^ (1 << 63))
}
