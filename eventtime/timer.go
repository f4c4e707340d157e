package eventtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

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
// Its timers live in the operator's state.KeyedBackend, in two map states
// named "_timers/<name>/event" and "_timers/<name>/processing", under the
// timer's record key with the user key
//
//	timestamp (8 bytes, big endian, sign bit flipped) | namespace
//
// and an empty value, so that they are checkpointed with the keyed state
// and move with their key group when a job is rescaled. The backend is the
// set (registering checks it, so duplicates never enter); the service
// keeps, in memory, one queue per domain over the same timers: a bucket
// per timestamp, sorted by key and namespace when it comes due, and a heap
// of the buckets. A deleted timer stays queued, marked, until it comes to
// the front or the marked entries outnumber the live timers (the queue is
// then rebuilt).
//
// NewTimerService rebuilds both queues from what the backend holds, which
// is how timers are restored: restore the backend first, then create the
// service.
//
// A TimerService is used from one goroutine (the task's), like its backend.
type TimerService struct {
	b    state.KeyedBackend
	q    [2]timerQueue
	keys map[string]*timerKey // interned keys of queued timers

	watermark int64
	procTime  int64
	firing    bool

	ubuf []byte // user key of a register or delete
	fbuf []byte // user key of the timer being fired

	// The key and namespace of the latest registration, reused when the
	// next one has the same (a window operator registers several timers
	// per element, for one key and window).
	lastKey *timerKey
	lastNS  string
}

// timerKey is an interned record key shared by every queued timer of that
// key. refs counts queue entries (of both domains, stale ones included)
// that point to it; at 0 it leaves the intern table.
type timerKey struct {
	key    []byte
	prefix timerPrefix
	group  int
	refs   int
}

// timerPrefix holds the first 16 bytes of a key, zero-padded, as two big
// endian integers: comparing two prefixes orders keys bytewise, except
// that equal prefixes need a comparison of the whole keys.
type timerPrefix struct{ hi, lo uint64 }

// timerItem is one entry of a queue. prefix copies k.prefix so that most
// comparisons of timers with equal timestamps need not follow k.
type timerItem struct {
	ts     int64
	prefix timerPrefix
	k      *timerKey
	ns     string
}

// timerUserKeyLen is the length of the timestamp prefix of a timer's user
// key.
const timerUserKeyLen = 8

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
		keys:      map[string]*timerKey{},
		watermark: math.MinInt64,
		procTime:  math.MinInt64,
	}
	for d, suffix := range [2]string{"event", "processing"} {
		id, err := b.Register("_timers/"+name+"/"+suffix, state.KindMap)
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
			q.push(timerItem{
				ts:     timerDecodeTimestamp(userKey),
				prefix: k.prefix,
				k:      k,
				ns:     string(userKey[timerUserKeyLen:]),
			})
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

func (s *TimerService) register(d TimerDomain, ts int64, ns []byte) error {
	key, group := s.b.CurrentKey()
	if group < 0 {
		return fmt.Errorf("eventtime: %s timer registered without a current key", d)
	}
	q := &s.q[d]
	s.ubuf = timerAppendUserKey(s.ubuf[:0], ts, ns)
	if _, ok, err := s.b.Get(q.id, s.ubuf); err != nil || ok {
		return err
	}
	if err := s.b.Put(q.id, s.ubuf, nil); err != nil {
		return err
	}
	k := s.intern(key, group)
	if string(ns) != s.lastNS {
		s.lastNS = string(ns)
	}
	q.push(timerItem{ts: ts, prefix: k.prefix, k: k, ns: s.lastNS})
	q.live++
	return nil
}

func (s *TimerService) delete(d TimerDomain, ts int64, ns []byte) error {
	key, group := s.b.CurrentKey()
	if group < 0 {
		return fmt.Errorf("eventtime: %s timer deleted without a current key", d)
	}
	q := &s.q[d]
	s.ubuf = timerAppendUserKey(s.ubuf[:0], ts, ns)
	if _, ok, err := s.b.Get(q.id, s.ubuf); err != nil || !ok {
		return err
	}
	if err := s.b.Delete(q.id, s.ubuf); err != nil {
		return err
	}
	k := s.keys[string(key)]
	if k == nil {
		panic(fmt.Sprintf("eventtime: %s timer at %d of key %q is in the backend but not queued", d, ts, key))
	}
	if q.stale == nil {
		q.stale = map[timerItem]int{}
	}
	q.stale[timerItem{ts: ts, prefix: k.prefix, k: k, ns: string(ns)}]++
	q.live--
	if stale := q.len() - q.live; stale > timerCompactMin && stale > q.live {
		s.compact(q)
	}
	return nil
}

// isStale reports whether it is the copy of a deleted timer, and if so
// forgets that copy.
func (s *TimerService) isStale(q *timerQueue, it timerItem) bool {
	if len(q.stale) == 0 {
		return false
	}
	n := q.stale[it]
	if n == 0 {
		return false
	}
	if n == 1 {
		delete(q.stale, it)
	} else {
		q.stale[it] = n - 1
	}
	s.unref(it.k)
	return true
}

func (s *TimerService) advance(d TimerDomain, t int64, fire TimerFunc) error {
	q := &s.q[d]
	s.firing = true
	defer func() { s.firing = false }()
	for {
		if ts, ok := q.minTimestamp(); !ok || ts > t {
			return nil
		}
		it := q.take()
		if s.isStale(q, it) {
			continue
		}
		s.b.SetCurrentKey(it.k.key, it.k.group)
		s.fbuf = timerAppendUserKey(s.fbuf[:0], it.ts, nil)
		s.fbuf = append(s.fbuf, it.ns...)
		if err := s.b.Delete(q.id, s.fbuf); err != nil {
			return err
		}
		q.live--
		err := fire(Timer{Timestamp: it.ts, Key: it.k.key, KeyGroup: it.k.group, Namespace: s.fbuf[timerUserKeyLen:]})
		s.unref(it.k)
		if err != nil {
			return err
		}
	}
}

func (s *TimerService) next(d TimerDomain) (int64, bool) {
	q := &s.q[d]
	if len(q.stale) == 0 {
		return q.minTimestamp()
	}
	return q.firstLive(func(it timerItem) bool { return s.isStale(q, it) })
}

// compact drops the stale entries of q.
func (s *TimerService) compact(q *timerQueue) {
	q.filter(func(it timerItem) bool { return !s.isStale(q, it) })
	q.stale = nil
	if n := q.len(); n != q.live {
		panic(fmt.Sprintf("eventtime: timer queue holds %d live entries, the backend %d", n, q.live))
	}
}

func (s *TimerService) intern(key []byte, group int) *timerKey {
	k := s.lastKey
	if k == nil || k.refs == 0 || !bytes.Equal(k.key, key) {
		k = s.keys[string(key)]
		if k == nil {
			k = &timerKey{key: bytes.Clone(key), group: group}
			var p [16]byte
			copy(p[:], key)
			k.prefix = timerPrefix{binary.BigEndian.Uint64(p[:8]), binary.BigEndian.Uint64(p[8:])}
			s.keys[string(key)] = k
		}
		s.lastKey = k
	}
	k.refs++
	return k
}

func (s *TimerService) unref(k *timerKey) {
	if k.refs--; k.refs == 0 {
		delete(s.keys, string(k.key))
	}
}

// timerAppendUserKey appends the user key of the timer (ts, ns).
func timerAppendUserKey(dst []byte, ts int64, ns []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts)^(1<<63))
	return append(dst, ns...)
}

func timerDecodeTimestamp(userKey []byte) int64 {
	return int64(binary.BigEndian.Uint64(userKey) ^ (1 << 63))
}
