package eventtime

import (
	"bytes"
	"slices"
	"sort"

	"github.com/weirstream/weir/state"
)

// timerQueue orders the timers of one domain by (timestamp, key,
// namespace). Timers come in groups of one timestamp (every key's window
// ends at the same time), so the queue keeps a bucket per timestamp and a
// min-heap of the buckets' timestamps. A bucket collects its timers
// unsorted and sorts them (by key, then namespace) when the first of them
// is taken; a timer added to a bucket already being taken is inserted in
// order.
type timerQueue struct {
	id      state.StateID
	buckets map[int64]*timerBucket
	times   []timerBucketRef // min-heap of the buckets by timestamp
	last    *timerBucket     // bucket of the latest push
	free    []*timerBucket
	sorter  timerSorter
	entries int // queued entries, stale ones included
	live    int // live timers; entries - live are stale
}

type timerBucketRef struct {
	ts int64
	b  *timerBucket
}

type timerBucket struct {
	ts     int64
	items  []timerEntry
	pos    int  // items[:pos] are taken
	sorted bool // items[pos:] are in order
}

// timerEntry is a queued timer without its timestamp (its bucket's).
type timerEntry struct {
	prefix timerPrefix
	k      *timerKey
	ns     string
}

func (e *timerEntry) item(ts int64) timerItem {
	return timerItem{ts: ts, prefix: e.prefix, k: e.k, ns: e.ns}
}

// timerCompare orders two timers of equal timestamps by key, then
// namespace.
func timerCompare(a, b *timerEntry) int {
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
		if c := bytes.Compare(a.k.key, b.k.key); c != 0 {
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

func (q *timerQueue) push(it timerItem) {
	b := q.last
	if b == nil || b.ts != it.ts {
		b = q.buckets[it.ts]
		if b == nil {
			b = q.newBucket(it.ts)
		}
		q.last = b
	}
	q.entries++
	if !b.sorted {
		b.items = append(b.items, timerEntry{prefix: it.prefix, k: it.k, ns: it.ns})
		return
	}
	q.insertSorted(b, timerEntry{prefix: it.prefix, k: it.k, ns: it.ns})
}

// insertSorted inserts e in order into a bucket whose first timers are
// being taken.
func (q *timerQueue) insertSorted(b *timerBucket, e timerEntry) {
	rest := b.items[b.pos:]
	i := sort.Search(len(rest), func(i int) bool { return timerCompare(&rest[i], &e) > 0 })
	b.items = slices.Insert(b.items, b.pos+i, e)
}

func (q *timerQueue) newBucket(ts int64) *timerBucket {
	if q.buckets == nil {
		q.buckets = map[int64]*timerBucket{}
	}
	var b *timerBucket
	if n := len(q.free); n > 0 {
		b = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		b = &timerBucket{}
	}
	b.ts = ts
	q.buckets[ts] = b
	q.times = append(q.times, timerBucketRef{ts, b})
	q.up(len(q.times) - 1)
	return b
}

// dropFront removes the bucket with the earliest timestamp.
func (q *timerQueue) dropFront() {
	b := q.times[0].b
	delete(q.buckets, b.ts)
	if q.last == b {
		q.last = nil
	}
	n := len(q.times) - 1
	q.times[0] = q.times[n]
	q.times[n] = timerBucketRef{}
	q.times = q.times[:n]
	q.down(0)
	clear(b.items)
	b.items, b.pos, b.sorted = b.items[:0], 0, false
	if cap(b.items) <= 1<<16 {
		q.free = append(q.free, b)
	}
}

// minTimestamp returns the earliest timestamp queued.
func (q *timerQueue) minTimestamp() (int64, bool) {
	if len(q.times) == 0 {
		return 0, false
	}
	return q.times[0].ts, true
}

// front returns the bucket with the earliest timestamp, sorted. The queue
// must not be empty.
func (q *timerQueue) front() *timerBucket {
	b := q.times[0].b
	if !b.sorted {
		if len(b.items)-b.pos > 1 {
			q.sorter.sort(b.items[b.pos:])
		}
		b.sorted = true
	}
	return b
}

// take removes and returns the first queued timer. The queue must not be
// empty.
func (q *timerQueue) take() timerItem {
	b := q.front()
	it := b.items[b.pos].item(b.ts)
	b.items[b.pos] = timerEntry{}
	b.pos++
	q.entries--
	if b.pos == len(b.items) {
		q.dropFront()
	}
	return it
}

// firstLive returns the earliest timestamp that has an entry for which
// stale returns false, removing the entries of earlier timestamps for
// which it returned true.
func (q *timerQueue) firstLive(stale func(timerItem) bool) (int64, bool) {
	for len(q.times) > 0 {
		b := q.times[0].b
		for b.pos < len(b.items) {
			if !stale(b.items[b.pos].item(b.ts)) {
				return b.ts, true
			}
			// Dropping the first entry keeps a sorted bucket sorted.
			b.items[b.pos] = timerEntry{}
			b.pos++
			q.entries--
		}
		q.dropFront()
	}
	return 0, false
}

// filter keeps the entries for which keep returns true.
func (q *timerQueue) filter(keep func(timerItem) bool) {
	for _, b := range q.buckets {
		kept := b.items[:0]
		for i := b.pos; i < len(b.items); i++ {
			if keep(b.items[i].item(b.ts)) {
				kept = append(kept, b.items[i])
			} else {
				q.entries--
			}
		}
		clear(b.items[len(kept):])
		b.items, b.pos = kept, 0
	}
	for _, b := range q.buckets {
		if len(b.items) == 0 {
			delete(q.buckets, b.ts)
		}
	}
	q.last = nil
	q.times = q.times[:0]
	for ts, b := range q.buckets {
		q.times = append(q.times, timerBucketRef{ts, b})
	}
	q.heapify()
}

// times is a binary min-heap.

func (q *timerQueue) up(i int) {
	h := q.times
	x := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].ts <= x.ts {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = x
}

func (q *timerQueue) down(i int) {
	h := q.times
	n := len(h)
	if i >= n {
		return
	}
	x := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].ts < h[c].ts {
			c = r
		}
		if h[c].ts >= x.ts {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = x
}

func (q *timerQueue) heapify() {
	for i := len(q.times)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}
