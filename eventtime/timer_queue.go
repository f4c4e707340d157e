package eventtime

import (
	"bytes"
	"slices"

	"github.com/weirstream/weir/state"
)

// timerQueue orders the timers of one domain by (timestamp, key,
// namespace). A registration appends its timer, unsorted, to the pending
// list; ordering waits until the earliest timer queued may be in it (its
// least timestamp is not after the heads of the runs). The pending list is
// then sorted at once (timerSorter: a radix sort when large) into a run, and
// the queue takes from the least of the runs' heads. Each timer is sorted
// once, whether the timers share a few timestamps (every key's window ends
// at the same time) or all differ (a backlog before a watermark jump), and
// no structure is kept per timestamp.
//
// Runs are merged like a timsort stack: after a new run, the two newest
// merge while the older holds at most twice the newer, so that the run
// sizes fall geometrically and there are O(log n) of them (timers
// registered one at a time while timers fire make runs of one).
type timerQueue struct {
	id         state.StateID
	pending    []timerEntry
	pendingMin int64 // least timestamp in pending
	runs       []timerRun
	free       [][]timerEntry // emptied run slices for reuse
	sorter     timerSorter
	entries    int // queued entries, stale ones included
	live       int // live timers; entries - live are stale
}

// timerRun is a sorted run of entries; e[pos:] are still queued (never
// none: an exhausted run leaves the queue).
type timerRun struct {
	e   []timerEntry
	pos int
}

// timerFreeRuns is the number of emptied run slices kept for reuse besides
// the pending list and the sorter's buffer: enough that a steady flow of
// timers, or a backlog that comes back, allocates nothing. Like a map's,
// the queue's memory is that of its largest backlog.
const timerFreeRuns = 2

// timerEntry is one entry of a queue: a timer of k in k.slot(slot).
// prefix copies k.prefix() so that most comparisons of timers with equal
// timestamps need not follow k.
type timerEntry struct {
	ts     int64
	prefix timerPrefix
	k      *timerKey
	ns     string
	slot   int32
}

// timerCompare orders two timers by timestamp, key, then namespace.
func timerCompare(a, b *timerEntry) int {
	if a.ts != b.ts {
		if a.ts < b.ts {
			return -1
		}
		return 1
	}
	if a.prefix.hi != b.prefix.hi {
		if a.prefix.hi < b.prefix.hi {
			return -1
		}
		return 1
	}
	if a.prefix.lo != b.prefix.lo {
		if a.prefix.lo < b.prefix.lo {
			return -1
		}
		return 1
	}
	if a.k != b.k {
		if c := bytes.Compare(a.k.key(), b.k.key()); c != 0 {
			return c
		}
	}
	switch {
	case a.ns < b.ns:
		return -1
	case a.ns > b.ns:
		return 1
	}
	return 0
}

func (q *timerQueue) len() int { return q.entries }

func (q *timerQueue) push(e timerEntry) {
	if len(q.pending) == 0 || e.ts < q.pendingMin {
		q.pendingMin = e.ts
	}
	if len(q.pending) == cap(q.pending) {
		// Double: append grows a long slice by a quarter at a time, so
		// that a backlog of a million timers is copied about four times
		// over while it builds up; doubling copies it about once.
		q.pending = slices.Grow(q.pending, max(len(q.pending), 64))
	}
	q.pending = append(q.pending, e)
	q.entries++
}

// minTimestamp returns the earliest timestamp queued.
func (q *timerQueue) minTimestamp() (int64, bool) {
	ts, ok := q.pendingMin, len(q.pending) > 0
	for i := range q.runs {
		r := &q.runs[i]
		if t := r.e[r.pos].ts; !ok || t < ts {
			ts, ok = t, true
		}
	}
	return ts, ok
}

// head returns the index of the run whose head is the first queued timer,
// sorting the pending timers into a run first if it may be among them.
// The queue must not be empty.
func (q *timerQueue) head() int {
	if len(q.pending) > 0 {
		seal := true
		for i := range q.runs {
			if r := &q.runs[i]; r.e[r.pos].ts < q.pendingMin {
				seal = false
				break
			}
		}
		if seal {
			q.seal()
		}
	}
	best := 0
	for i := 1; i < len(q.runs); i++ {
		if timerCompare(&q.runs[i].e[q.runs[i].pos], &q.runs[best].e[q.runs[best].pos]) < 0 {
			best = i
		}
	}
	return best
}

// take removes and returns the first queued timer. The queue must not be
// empty.
func (q *timerQueue) take() timerEntry {
	i := q.head()
	r := &q.runs[i]
	e := r.e[r.pos]
	q.dropHead(i)
	return e
}

// timerTouchBatch is how many queued timers advance reads ahead at a
// time, before firing them (timerQueue.touch).
const timerTouchBatch = 16

// touch reads ahead of the timers about to fire, and returns a sum of what
// it read: the key records of the entries n to 2n ahead of each run's
// head, and the slots (out of line when the key has more than two timers)
// of the next n, whose records the previous call read. Firing a timer
// reads its key record and its slot, usually cache misses (timers fire in
// key order, the records lie in the order the keys first registered), and
// the firing's dependent work keeps the processor from reaching the next
// timer's record before that miss is over. touch's loads do not depend on
// each other, except a slot on its record read a batch earlier: their
// misses overlap.
func (q *timerQueue) touch(n int) int {
	sum := 0
	for i := range q.runs {
		r := &q.runs[i]
		next := r.e[r.pos:min(r.pos+n, len(r.e))]
		for _, e := range next {
			if k := e.k; e.slot >= int32(len(k.inl)) && e.slot < k.n {
				sum += int(k.slot(int(e.slot)).ts)
			}
		}
		for _, e := range r.e[r.pos+len(next) : min(r.pos+2*n, len(r.e))] {
			sum += int(e.k.n) + int(e.k.inl[1].d)
		}
	}
	return sum
}

// dropHead removes the head of run i.
func (q *timerQueue) dropHead(i int) {
	r := &q.runs[i]
	r.pos++
	q.entries--
	if r.pos == len(r.e) {
		q.recycle(r.e)
		q.runs = slices.Delete(q.runs, i, i+1)
	}
}

// firstLive returns the earliest timestamp that has an entry for which
// stale returns false, removing the entries before it for which it
// returned true.
func (q *timerQueue) firstLive(stale func(timerEntry) bool) (int64, bool) {
	for q.entries > 0 {
		i := q.head()
		r := &q.runs[i]
		if !stale(r.e[r.pos]) {
			return r.e[r.pos].ts, true
		}
		q.dropHead(i)
	}
	return 0, false
}

// filter keeps the entries for which keep returns true.
func (q *timerQueue) filter(keep func(timerEntry) bool) {
	kept := q.pending[:0]
	for _, e := range q.pending {
		if keep(e) {
			if len(kept) == 0 || e.ts < q.pendingMin {
				q.pendingMin = e.ts
			}
			kept = append(kept, e)
		}
	}
	clear(q.pending[len(kept):])
	q.pending = kept
	runs := q.runs[:0]
	for _, r := range q.runs {
		kept := r.e[:0]
		for _, e := range r.e[r.pos:] {
			if keep(e) {
				kept = append(kept, e) // in order still
			}
		}
		clear(r.e[len(kept):])
		if len(kept) == 0 {
			q.recycle(r.e)
			continue
		}
		runs = append(runs, timerRun{e: kept})
	}
	clear(q.runs[len(runs):])
	q.runs = runs
	q.entries = len(q.pending)
	for _, r := range q.runs {
		q.entries += len(r.e)
	}
}

// seal sorts the pending timers into a new run and merges the newest runs
// while the older of the two is at most twice as long as the newer.
func (q *timerQueue) seal() {
	q.runs = append(q.runs, timerRun{e: q.sorter.sort(q.pending)})
	q.pending = q.spare()
	for n := len(q.runs); n >= 2; n = len(q.runs) {
		a, b := &q.runs[n-2], &q.runs[n-1]
		if len(a.e)-a.pos > 2*(len(b.e)-b.pos) {
			break
		}
		out := timerMerge(slices.Grow(q.spare(), len(a.e)-a.pos+len(b.e)-b.pos), a.e[a.pos:], b.e[b.pos:])
		q.recycle(a.e)
		q.recycle(b.e)
		q.runs[n-2] = timerRun{e: out}
		q.runs[n-1] = timerRun{}
		q.runs = q.runs[:n-1]
	}
}

// timerMerge appends the merge of the sorted a and b to dst.
func timerMerge(dst, a, b []timerEntry) []timerEntry {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if timerCompare(&b[j], &a[i]) < 0 {
			dst = append(dst, b[j])
			j++
		} else {
			dst = append(dst, a[i])
			i++
		}
	}
	dst = append(dst, a[i:]...)
	return append(dst, b[j:]...)
}

// spare returns an empty slice, reusing an emptied run's if any.
func (q *timerQueue) spare() []timerEntry {
	n := len(q.free)
	if n == 0 {
		return nil
	}
	e := q.free[n-1]
	q.free[n-1] = nil
	q.free = q.free[:n-1]
	return e
}

// recycle keeps e, emptied, for reuse if there is room: as the pending
// list if that has no room of its own (it was sealed), else as a spare.
func (q *timerQueue) recycle(e []timerEntry) {
	clear(e)
	switch {
	case cap(q.pending) == 0:
		q.pending = e[:0]
	case len(q.free) < timerFreeRuns:
		q.free = append(q.free, e[:0])
	}
}
