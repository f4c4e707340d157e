package task

import (
	"time"

	"github.com/weirstream/weir/network/debloat"
)

// debloating is a task's buffer debloating: every period it samples what
// its input gate consumed and, when the debloater says so, tells every
// input channel the buffer size to use (network/debloat).
type debloating struct {
	d     *debloat.Debloater
	every time.Duration
	next  time.Time
	last  time.Time
	bytes int64
	idle  time.Duration
}

// queuedChannel is an input channel that counts its queued data buffers
// and passes a buffer size on to its producer.
type queuedChannel interface {
	Queued() int
	SetBufferSize(n int)
}

func (t *Task) startDebloating(now time.Time) {
	if t.debloat == nil {
		return
	}
	t.debloat.last, t.debloat.next = now, now.Add(t.debloat.every)
}

// sampleDebloat takes one sample of the gate's throughput at now.
func (t *Task) sampleDebloat(now time.Time) {
	db := t.debloat
	bytes, idle := t.metrics.BytesIn-db.bytes, t.metrics.Idle-db.idle
	busy := now.Sub(db.last) - idle
	db.bytes, db.idle, db.last, db.next = t.metrics.BytesIn, t.metrics.Idle, now, now.Add(db.every)
	g := t.cfg.Gate
	queued := 0
	for i := range g.NumChannels() {
		if qc, ok := g.Channel(i).(queuedChannel); ok {
			queued += qc.Queued()
		}
	}
	size, announce := db.d.Sample(bytes, busy, queued)
	if !announce {
		return
	}
	for i := range g.NumChannels() {
		if qc, ok := g.Channel(i).(queuedChannel); ok {
			qc.SetBufferSize(size)
		}
	}
}
