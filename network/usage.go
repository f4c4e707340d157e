package network

import "time"

// BufferUsage describes the buffers on one side of an exchange at one
// instant, for metrics (Flink's inPoolUsage, outPoolUsage,
// inputQueueLength and outputQueueLength). It is read from any goroutine
// while the task runs; the values are a snapshot, not a consistent cut.
type BufferUsage struct {
	// Queued is the number of data buffers waiting to be consumed.
	Queued int
	// InUse is the number of buffers in use: queued, being written or
	// being read.
	InUse int
	// Capacity is the most buffers this side may hold.
	Capacity int
}

// Add returns the sum of u and v.
func (u BufferUsage) Add(v BufferUsage) BufferUsage {
	return BufferUsage{Queued: u.Queued + v.Queued, InUse: u.InUse + v.InUse, Capacity: u.Capacity + v.Capacity}
}

// Ratio is InUse/Capacity, in [0, 1] (0 without capacity).
func (u BufferUsage) Ratio() float64 {
	if u.Capacity <= 0 {
		return 0
	}
	return min(1, float64(u.InUse)/float64(u.Capacity))
}

// Usage reports the partition's buffers: its data buffers queued in
// every subpartition, and those its pool handed out and has not got back
// (queued, being filled, or being read by a local consumer). Safe from
// any goroutine; it takes each subpartition's lock once.
func (p *ResultPartition) Usage() BufferUsage {
	u := BufferUsage{InUse: p.pool.Outstanding(), Capacity: p.pool.Max()}
	for _, s := range p.subs {
		u.Queued += s.Backlog()
	}
	return u
}

// BackPressuredFor reports how long the producer has been waiting for a
// free buffer inside a write (0 when it is not waiting). Safe from any
// goroutine: a task blocked in a write cannot say so itself.
func (p *ResultPartition) BackPressuredFor() time.Duration {
	start := p.waitStart.Load()
	if start == 0 {
		return 0
	}
	return max(0, time.Duration(monoSince(time.Now())-start))
}

// Usage reports the gate's input buffers. A remote channel's buffers
// come from the gate's receive pool (exclusive and floating buffers); a
// local channel holds none of its own, so for it the data buffers queued
// in the subpartition it reads count as in use, out of its share of the
// producer's pool. Safe from any goroutine.
func (g *InputGate) Usage() BufferUsage {
	var u BufferUsage
	var rb *RemoteBuffers
	for _, c := range g.channels {
		switch c := c.(type) {
		case *LocalChannel:
			n := c.sub.Backlog()
			p := c.sub.parent
			u.Queued += n
			u.InUse += n
			u.Capacity += max(1, p.pool.Max()/len(p.subs))
		case *RemoteChannel:
			c.mu.Lock()
			u.Queued += len(c.mu.queue) - c.mu.head
			c.mu.Unlock()
			rb = c.rb // one per gate
		}
	}
	if rb != nil {
		u.InUse += rb.pool.Outstanding()
		u.Capacity += rb.pool.Max()
	}
	return u
}

// monoEpoch anchors monoSince.
var monoEpoch = time.Now()

// monoSince is t on the monotonic clock, in nanoseconds since the
// package started (never 0).
func monoSince(t time.Time) int64 { return int64(t.Sub(monoEpoch)) + 1 }
