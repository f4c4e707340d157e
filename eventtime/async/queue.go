package async

import (
	"fmt"
	"math"
	"slices"
)

// Mode says in which order results leave the queue.
type Mode uint8

const (
	// Ordered: results leave in input order.
	Ordered Mode = iota
	// Unordered: results leave as they complete, but never across a
	// watermark.
	Unordered
)

func (m Mode) String() string {
	if m == Unordered {
		return "unordered"
	}
	return "ordered"
}

// DefaultCapacity is a queue's capacity when Config.Capacity is zero.
const DefaultCapacity = 100

// Config describes a queue. The zero value is an ordered queue of
// DefaultCapacity elements without timeout.
type Config struct {
	// Capacity is how many elements the queue holds (in flight, timed
	// out, or done and not yet emitted); 0 means DefaultCapacity.
	Capacity int
	Mode     Mode
	// Timeout is how long, in ms of processing time after it was issued,
	// a request may take; 0 means forever.
	Timeout int64
}

// WithDefaults returns c with its zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	return c
}

// Validate reports a configuration the queue cannot run with.
func (c Config) Validate() error {
	switch {
	case c.Capacity < 0:
		return fmt.Errorf("async: capacity %d is negative", c.Capacity)
	case c.Capacity > math.MaxInt32:
		return fmt.Errorf("async: capacity %d above %d", c.Capacity, math.MaxInt32)
	case c.Timeout < 0:
		return fmt.Errorf("async: timeout %d is negative", c.Timeout)
	case c.Mode != Ordered && c.Mode != Unordered:
		return fmt.Errorf("async: unknown mode %d", c.Mode)
	}
	return nil
}

// ID names one request of a queue. A timed-out request gets a new ID, so
// that the first request's late result is not taken for its fallback.
type ID struct {
	slot int32
	gen  uint32
}

// Request is a request the caller must start (Queue.TakeIssued) or that
// timed out (Queue.Timeout): its element and, with a timeout, its deadline
// (math.MaxInt64 without).
type Request[In any] struct {
	ID        ID
	Value     In
	Timestamp int64
	Deadline  int64
}

// Output is what leaves the queue: a record (a result with its input's
// timestamp) or a watermark (Timestamp is the watermark).
type Output[Out any] struct {
	Watermark bool
	Value     Out
	Timestamp int64
}

// Element is an input element with its timestamp, as Snapshot lists it.
type Element[In any] struct {
	Value     In
	Timestamp int64
}

// Status is where an element of the queue stands.
type Status uint8

const (
	// Waiting: in the overflow, not issued yet.
	Waiting Status = iota
	// InFlight: its request is running.
	InFlight
	// TimedOut: its request timed out; the caller owes its fallback.
	TimedOut
	// Done: its result is in, waiting for its turn to leave.
	Done
)

func (s Status) String() string {
	return [...]string{"waiting", "inflight", "timedout", "done"}[s]
}

// Entry describes one element of the queue (Queue.Entries).
type Entry[In, Out any] struct {
	Status    Status
	Value     In
	Timestamp int64
	Deadline  int64 // InFlight only
	Result    Out   // Done only
	// Watermark marks a watermark waiting in the queue (Timestamp is the
	// watermark; the other fields are zero).
	Watermark bool
}

const none = -1

type slot[In, Out any] struct {
	st       Status // InFlight, TimedOut or Done while used
	used     bool
	gen      uint32
	seq      uint64 // input order
	in       In
	ts       int64
	out      Out
	deadline int64
	// prev and next link the in-flight slots in issue order, which is
	// deadline order.
	prev, next int32
	// seg is the unordered segment of the element; cnext links its
	// segment's completed elements in completion order.
	seg   uint64
	cnext int32
}

// item is an element of the ordered queue: a slot, or a watermark (slot
// none).
type item struct {
	slot int32
	wm   int64
}

// waiting is an element or watermark of the overflow.
type waiting[In any] struct {
	wm bool
	in In
	ts int64 // the element's timestamp, or the watermark
}

// segment is the unordered queue's group of elements between two
// watermarks.
type segment struct {
	id      uint64
	records int // elements not emitted yet
	// chead and ctail are its completed elements, in completion order.
	chead, ctail int32
	closed       bool  // a watermark ends it
	wm           int64 // that watermark
}

// Queue is the async operator's queue (see the package doc). Not safe
// for concurrent use: the task goroutine owns it.
type Queue[In, Out any] struct {
	cfg   Config
	slots []slot[In, Out]
	free  []int32
	used  int
	seq   uint64

	overflow ring[waiting[In]]
	order    ring[item]    // Ordered
	segs     ring[segment] // Unordered
	nextSeg  uint64

	dhead, dtail int32 // the in-flight slots by deadline (with a timeout)

	issued []Request[In]
	out    []Output[Out]
}

// New returns an empty queue.
func New[In, Out any](cfg Config) (*Queue[In, Out], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	q := &Queue[In, Out]{cfg: cfg, slots: make([]slot[In, Out], cfg.Capacity), free: make([]int32, cfg.Capacity),
		dhead: none, dtail: none}
	for i := range q.free {
		q.free[i] = int32(cfg.Capacity - 1 - i)
	}
	return q, nil
}

// Config returns the queue's configuration, defaults applied.
func (q *Queue[In, Out]) Config() Config { return q.cfg }

// Full reports whether the queue holds Capacity elements or has elements
// waiting: the caller takes no input until it is not full again.
func (q *Queue[In, Out]) Full() bool { return q.used == q.cfg.Capacity || q.overflow.len() > 0 }

// Empty reports whether no element is left in the queue (watermarks may
// be: they leave with the elements before them).
func (q *Queue[In, Out]) Empty() bool { return q.used == 0 && q.overflow.len() == 0 }

// Len is the number of elements in the queue, the waiting ones included.
func (q *Queue[In, Out]) Len() int {
	n := q.used
	for i := range q.overflow.len() {
		if !q.overflow.at(i).wm {
			n++
		}
	}
	return n
}

// Add puts an element with timestamp ts into the queue at processing time
// now: it is issued (TakeIssued) if there is room, else it waits.
func (q *Queue[In, Out]) Add(v In, ts, now int64) {
	if q.overflow.len() > 0 || q.used == q.cfg.Capacity {
		q.overflow.push(waiting[In]{in: v, ts: ts})
		return
	}
	q.admit(v, ts, now)
}

// Watermark puts a watermark into the queue: it leaves after every element
// before it.
func (q *Queue[In, Out]) Watermark(wm int64) {
	if n := q.overflow.len(); n > 0 {
		if last := q.overflow.at(n - 1); last.wm {
			last.ts = wm
			return
		}
		q.overflow.push(waiting[In]{wm: true, ts: wm})
		return
	}
	q.admitWatermark(wm)
}

// Complete hands the queue the result of request id at processing time
// now. It returns false, and changes nothing, when the queue does not know
// id (a late result of a request that timed out).
func (q *Queue[In, Out]) Complete(id ID, out Out, now int64) bool {
	if !q.Known(id) {
		return false
	}
	s := &q.slots[id.slot]
	if s.st == InFlight {
		q.unlinkDeadline(id.slot)
	}
	s.out, s.st = out, Done
	if q.cfg.Mode == Ordered {
		q.drainOrdered()
	} else {
		q.completeUnordered(id.slot)
	}
	q.admitOverflow(now)
	return true
}

// Known reports whether id is a request of the queue whose result is
// still awaited (in flight, or timed out and waiting for its fallback).
func (q *Queue[In, Out]) Known(id ID) bool {
	if id.slot < 0 || int(id.slot) >= len(q.slots) {
		return false
	}
	s := &q.slots[id.slot]
	return s.used && s.gen == id.gen && s.st != Done
}

// Timeout times out every request in flight whose deadline is at or
// before now, appending them to dst in issue order, each with the new ID
// under which the caller completes it with a fallback result.
func (q *Queue[In, Out]) Timeout(now int64, dst []Request[In]) []Request[In] {
	for q.dhead != none && q.slots[q.dhead].deadline <= now {
		i := q.dhead
		q.unlinkDeadline(i)
		s := &q.slots[i]
		s.st = TimedOut
		s.gen++
		dst = append(dst, Request[In]{ID: ID{slot: i, gen: s.gen}, Value: s.in, Timestamp: s.ts, Deadline: s.deadline})
	}
	return dst
}

// NextDeadline returns the earliest deadline of the requests in flight
// (false: none, or no timeout).
func (q *Queue[In, Out]) NextDeadline() (int64, bool) {
	if q.dhead == none {
		return 0, false
	}
	return q.slots[q.dhead].deadline, true
}

// TakeIssued appends the requests issued since the last call to dst, in
// issue order, and forgets them.
func (q *Queue[In, Out]) TakeIssued(dst []Request[In]) []Request[In] {
	dst = append(dst, q.issued...)
	clear(q.issued)
	q.issued = q.issued[:0]
	return dst
}

// TakeOut appends what left the queue since the last call to dst, in
// order, and forgets it.
func (q *Queue[In, Out]) TakeOut(dst []Output[Out]) []Output[Out] {
	dst = append(dst, q.out...)
	clear(q.out)
	q.out = q.out[:0]
	return dst
}

// Snapshot appends the elements not yet emitted to dst, in input order:
// a queue restored from them (Add in this order) issues them again.
func (q *Queue[In, Out]) Snapshot(dst []Element[In]) []Element[In] {
	start := len(dst)
	for i := range q.slots {
		if s := &q.slots[i]; s.used {
			dst = append(dst, Element[In]{Value: s.in, Timestamp: s.ts})
		}
	}
	// Input order: by sequence number (slots are reused in any order).
	seqs := make([]uint64, 0, q.used)
	for i := range q.slots {
		if q.slots[i].used {
			seqs = append(seqs, q.slots[i].seq)
		}
	}
	sortBySeq(dst[start:], seqs)
	for i := range q.overflow.len() {
		if w := q.overflow.at(i); !w.wm {
			dst = append(dst, Element[In]{Value: w.in, Timestamp: w.ts})
		}
	}
	return dst
}

// Entries appends every element and watermark of the queue to dst, in
// input order.
func (q *Queue[In, Out]) Entries(dst []Entry[In, Out]) []Entry[In, Out] {
	entry := func(i int32) Entry[In, Out] {
		s := &q.slots[i]
		e := Entry[In, Out]{Status: s.st, Value: s.in, Timestamp: s.ts}
		switch s.st {
		case InFlight:
			e.Deadline = s.deadline
		case Done:
			e.Result = s.out
		}
		return e
	}
	if q.cfg.Mode == Ordered {
		for i := range q.order.len() {
			it := q.order.at(i)
			if it.slot == none {
				dst = append(dst, Entry[In, Out]{Watermark: true, Timestamp: it.wm})
			} else {
				dst = append(dst, entry(it.slot))
			}
		}
	} else {
		// Each segment's elements in input order, then its watermark.
		for k := range q.segs.len() {
			sg := q.segs.at(k)
			var idx []int32
			for i := range q.slots {
				if q.slots[i].used && q.slots[i].seg == sg.id {
					idx = append(idx, int32(i))
				}
			}
			slices.SortFunc(idx, func(a, b int32) int {
				return cmpSeq(q.slots[a].seq, q.slots[b].seq)
			})
			for _, i := range idx {
				dst = append(dst, entry(i))
			}
			if sg.closed {
				dst = append(dst, Entry[In, Out]{Watermark: true, Timestamp: sg.wm})
			}
		}
	}
	for i := range q.overflow.len() {
		w := q.overflow.at(i)
		if w.wm {
			dst = append(dst, Entry[In, Out]{Watermark: true, Timestamp: w.ts})
		} else {
			dst = append(dst, Entry[In, Out]{Status: Waiting, Value: w.in, Timestamp: w.ts})
		}
	}
	return dst
}

// admit issues an element into a free slot.
func (q *Queue[In, Out]) admit(v In, ts, now int64) {
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.used++
	s := &q.slots[i]
	s.used, s.st, s.in, s.ts, s.seq = true, InFlight, v, ts, q.seq
	q.seq++
	s.deadline = math.MaxInt64
	s.prev, s.next, s.cnext = none, none, none
	if q.cfg.Timeout > 0 {
		s.deadline = satAdd(now, q.cfg.Timeout)
		q.linkDeadline(i)
	}
	if q.cfg.Mode == Ordered {
		q.order.push(item{slot: i})
	} else {
		n := q.segs.len()
		if n == 0 || q.segs.at(n-1).closed {
			q.segs.push(segment{id: q.nextSeg, chead: none, ctail: none})
			q.nextSeg++
			n++
		}
		sg := q.segs.at(n - 1)
		sg.records++
		s.seg = sg.id
	}
	q.issued = append(q.issued, Request[In]{ID: ID{slot: i, gen: s.gen}, Value: v, Timestamp: ts, Deadline: s.deadline})
}

// admitWatermark puts a watermark behind the queue's elements, or lets it
// out at once when none is left before it.
func (q *Queue[In, Out]) admitWatermark(wm int64) {
	if q.cfg.Mode == Ordered {
		n := q.order.len()
		switch {
		case n == 0:
			q.out = append(q.out, Output[Out]{Watermark: true, Timestamp: wm})
		case q.order.at(n-1).slot == none:
			q.order.at(n - 1).wm = wm
		default:
			q.order.push(item{slot: none, wm: wm})
		}
		return
	}
	n := q.segs.len()
	if n == 0 {
		q.out = append(q.out, Output[Out]{Watermark: true, Timestamp: wm})
		return
	}
	last := q.segs.at(n - 1)
	last.closed, last.wm = true, wm
	q.drainUnordered()
}

// admitOverflow moves waiting elements and watermarks into the queue while
// there is room.
func (q *Queue[In, Out]) admitOverflow(now int64) {
	for q.overflow.len() > 0 {
		w := q.overflow.at(0)
		if w.wm {
			q.admitWatermark(w.ts)
		} else if q.used < q.cfg.Capacity {
			q.admit(w.in, w.ts, now)
		} else {
			return
		}
		q.overflow.pop()
	}
}

// drainOrdered lets out the head of the ordered queue while it is done or
// a watermark.
func (q *Queue[In, Out]) drainOrdered() {
	for q.order.len() > 0 {
		it := q.order.at(0)
		if it.slot == none {
			q.out = append(q.out, Output[Out]{Watermark: true, Timestamp: it.wm})
		} else if s := &q.slots[it.slot]; s.st == Done {
			q.emit(it.slot)
		} else {
			return
		}
		q.order.pop()
	}
}

// completeUnordered lets a completed element out if its segment is the
// first, else queues it in its segment's completed list.
func (q *Queue[In, Out]) completeUnordered(i int32) {
	s := &q.slots[i]
	first := q.segs.at(0)
	if s.seg == first.id {
		first.records--
		q.emit(i)
		q.drainUnordered()
		return
	}
	sg := q.segs.at(int(s.seg - first.id))
	if sg.ctail == none {
		sg.chead = i
	} else {
		q.slots[sg.ctail].cnext = i
	}
	sg.ctail = i
}

// drainUnordered lets out the first segment's completed elements and, once
// it has none left, its watermark; then the next segment's.
func (q *Queue[In, Out]) drainUnordered() {
	for q.segs.len() > 0 {
		sg := q.segs.at(0)
		for sg.chead != none {
			i := sg.chead
			sg.chead = q.slots[i].cnext
			sg.records--
			q.emit(i)
		}
		sg.ctail = none
		if sg.records > 0 {
			return
		}
		if sg.closed {
			q.out = append(q.out, Output[Out]{Watermark: true, Timestamp: sg.wm})
		}
		q.segs.pop()
	}
}

// emit lets a done element out and frees its slot.
func (q *Queue[In, Out]) emit(i int32) {
	s := &q.slots[i]
	q.out = append(q.out, Output[Out]{Value: s.out, Timestamp: s.ts})
	var zeroIn In
	var zeroOut Out
	s.in, s.out = zeroIn, zeroOut
	s.used = false
	s.gen++
	q.used--
	q.free = append(q.free, i)
}

func (q *Queue[In, Out]) linkDeadline(i int32) {
	s := &q.slots[i]
	s.prev, s.next = q.dtail, none
	if q.dtail == none {
		q.dhead = i
	} else {
		q.slots[q.dtail].next = i
	}
	q.dtail = i
}

func (q *Queue[In, Out]) unlinkDeadline(i int32) {
	s := &q.slots[i]
	if q.cfg.Timeout <= 0 {
		return
	}
	if s.prev == none {
		q.dhead = s.next
	} else {
		q.slots[s.prev].next = s.next
	}
	if s.next == none {
		q.dtail = s.prev
	} else {
		q.slots[s.next].prev = s.prev
	}
	s.prev, s.next = none, none
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sortBySeq sorts els by the parallel keys seqs.
func sortBySeq[In any](els []Element[In], seqs []uint64) {
	idx := make([]int, len(els))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmpSeq(seqs[a], seqs[b]) })
	sorted := make([]Element[In], len(els))
	for i, j := range idx {
		sorted[i] = els[j]
	}
	copy(els, sorted)
}

// ring is a FIFO that grows as needed and reuses its space.
type ring[T any] struct {
	buf        []T
	head, size int
}

func (r *ring[T]) len() int { return r.size }

func (r *ring[T]) at(i int) *T { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *ring[T]) push(v T) {
	if r.size == len(r.buf) {
		n := max(4, 2*len(r.buf))
		buf := make([]T, n)
		for i := range r.size {
			buf[i] = *r.at(i)
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

func (r *ring[T]) pop() {
	var zero T
	r.buf[r.head] = zero
	r.head = (r.head + 1) % len(r.buf)
	r.size--
}
