package task

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
)

// publishInterval bounds how stale the counters LiveMetrics reports are
// while the task processes input: the task publishes them at most this
// often from its loop, and whenever it starts or stops waiting.
const publishInterval = 50 * time.Millisecond

// LiveMetrics is a task's metrics at one instant, read while it runs
// (Task.LiveMetrics). Counters and times are cumulative since the task
// started running; rates come from two readings: the difference of a
// counter over the difference of Elapsed.
type LiveMetrics struct {
	Key   state.TaskKey
	Name  string
	State State
	// Elapsed is the task's running time the values describe: they are
	// exact as of Elapsed after the task started, which lags the reading
	// by at most publishInterval (or by the time one buffer takes).
	Elapsed time.Duration

	RecordsIn, RecordsOut int64
	BytesIn, BytesOut     int64
	// Busy, Idle and BackPressured add up to Elapsed: idle is waiting for
	// input, back-pressured waiting for output buffers, busy the rest.
	Busy, Idle, BackPressured time.Duration

	// InputWatermark is the combined watermark of the task's inputs
	// (eventtime.MinWatermark for a source task or before any);
	// OutputWatermark the last one it sent.
	InputWatermark, OutputWatermark int64

	// Input and Output are the task's buffers now (all of its output
	// partitions together).
	Input, Output network.BufferUsage

	// Operators holds the operators of the chain that count late records
	// (window operators), in chain order.
	Operators []OperatorMetrics
}

// OperatorMetrics are the metrics of one operator of a task's chain.
type OperatorMetrics struct {
	Name string
	// LateRecordsDropped counts the late records the operator dropped
	// (Flink's numLateRecordsDropped).
	LateRecordsDropped int64
}

// LateCounter is implemented by operators that drop late records and
// count them (window operators); the task reports the count.
type LateCounter interface {
	LateRecordsDropped() int64
}

// waitKind says what a task that published is doing since.
type waitKind int32

const (
	notWaiting waitKind = iota
	waitingIdle
	waitingBackPressured
)

// live is what a task publishes for readers in other goroutines: a
// seqlock over atomic fields (odd seq: a write is in progress), written
// only by the task's goroutine. Readers never block the task, and the
// task never waits for a reader.
type live struct {
	seq     atomic.Uint64
	state   atomic.Int32
	started atomic.Int64 // monotonic ns of Run's start; 0 before
	elapsed atomic.Int64 // ns since started that the values describe
	waiting atomic.Int32 // waitKind since elapsed

	recordsIn, recordsOut atomic.Int64
	bytesIn, bytesOut     atomic.Int64
	idle, backPressured   atomic.Int64
	inWM, outWM           atomic.Int64
	late                  []atomic.Int64 // per lateOps
}

// liveValues is one publication.
type liveValues struct {
	elapsed               time.Duration
	waiting               waitKind
	recordsIn, recordsOut int64
	bytesIn, bytesOut     int64
	idle, backPressured   time.Duration
	inWM, outWM           int64
}

func (l *live) store(v *liveValues, late []LateCounter) {
	l.seq.Add(1)
	l.elapsed.Store(int64(v.elapsed))
	l.waiting.Store(int32(v.waiting))
	l.recordsIn.Store(v.recordsIn)
	l.recordsOut.Store(v.recordsOut)
	l.bytesIn.Store(v.bytesIn)
	l.bytesOut.Store(v.bytesOut)
	l.idle.Store(int64(v.idle))
	l.backPressured.Store(int64(v.backPressured))
	l.inWM.Store(v.inWM)
	l.outWM.Store(v.outWM)
	for i, op := range late {
		l.late[i].Store(op.LateRecordsDropped())
	}
	l.seq.Add(1)
}

func (l *live) load(v *liveValues, late []int64) {
	for {
		s := l.seq.Load()
		if s&1 != 0 {
			runtime.Gosched()
			continue
		}
		v.elapsed = time.Duration(l.elapsed.Load())
		v.waiting = waitKind(l.waiting.Load())
		v.recordsIn = l.recordsIn.Load()
		v.recordsOut = l.recordsOut.Load()
		v.bytesIn = l.bytesIn.Load()
		v.bytesOut = l.bytesOut.Load()
		v.idle = time.Duration(l.idle.Load())
		v.backPressured = time.Duration(l.backPressured.Load())
		v.inWM = l.inWM.Load()
		v.outWM = l.outWM.Load()
		for i := range late {
			late[i] = l.late[i].Load()
		}
		if l.seq.Load() == s {
			return
		}
	}
}

// monoEpoch anchors mono.
var monoEpoch = time.Now()

// mono is t on the monotonic clock, in ns since the package started
// (never 0).
func mono(t time.Time) int64 { return int64(t.Sub(monoEpoch)) + 1 }

// liveState is the task's side of LiveMetrics.
type liveState struct {
	live      live
	lateOps   []LateCounter
	lateNames []string
	// startedAt is Run's start, set once the operators are open (zero
	// before: nothing is published).
	startedAt   time.Time
	nextPublish time.Time
}

// initLive finds the chain's late counters; New calls it.
func (t *Task) initLive() {
	l := &t.lv
	for _, op := range t.cfg.Operators {
		if lc, ok := op.(LateCounter); ok {
			l.lateOps = append(l.lateOps, lc)
			l.lateNames = append(l.lateNames, op.Name())
		}
	}
	l.live.late = make([]atomic.Int64, len(l.lateOps))
	l.live.inWM.Store(eventtime.MinWatermark)
	l.live.outWM.Store(eventtime.MinWatermark)
}

// startLive starts publishing, once the operators are open; start is
// Run's start.
func (t *Task) startLive(start time.Time) {
	t.lv.startedAt = start
	t.lv.live.started.Store(mono(start))
	t.publish(time.Now(), notWaiting)
}

// setLiveState publishes the task's lifecycle state.
func (t *Task) setLiveState(s State) { t.lv.live.state.Store(int32(s)) }

// publish makes the task's counters as of now visible to LiveMetrics;
// waiting says what the task does from now on. Only from the task's
// goroutine, once startLive ran.
func (t *Task) publish(now time.Time, waiting waitKind) {
	if t.lv.startedAt.IsZero() {
		return
	}
	v := liveValues{
		elapsed:       now.Sub(t.lv.startedAt),
		waiting:       waiting,
		recordsIn:     t.metrics.RecordsIn,
		bytesIn:       t.metrics.BytesIn,
		idle:          t.metrics.Idle,
		backPressured: t.metrics.BackPressured,
		inWM:          t.InputWatermark(),
		outWM:         t.out.watermark,
	}
	for _, p := range t.cfg.Outputs {
		s := p.Stats()
		v.recordsOut += s.Records
		v.bytesOut += s.Bytes
		v.backPressured += s.BackPressured
	}
	t.lv.live.store(&v, t.lv.lateOps)
	t.lv.nextPublish = now.Add(publishInterval)
}

// maybePublish publishes if the last publication is publishInterval old.
func (t *Task) maybePublish(now time.Time) {
	if !now.Before(t.lv.nextPublish) {
		t.publish(now, notWaiting)
	}
}

// publishFinal publishes the final metrics (collectMetrics ran).
func (t *Task) publishFinal(total time.Duration) {
	if t.lv.startedAt.IsZero() {
		return // never opened: nothing to report
	}
	m := &t.metrics
	v := liveValues{elapsed: total, recordsIn: m.RecordsIn, recordsOut: m.RecordsOut, bytesIn: m.BytesIn, bytesOut: m.BytesOut,
		idle: m.Idle, backPressured: m.BackPressured, inWM: t.InputWatermark(), outWM: t.out.watermark}
	t.lv.live.store(&v, t.lv.lateOps)
}

// LiveMetrics returns the task's metrics now, from any goroutine, while
// it runs or after. It takes none of the task's locks and never waits for
// the task: it reads what the task last published and adds the wait the
// task is in now (for input, for an output buffer in its loop, or for a
// buffer inside a write), so that a task stuck waiting reports it.
// Buffer usage is read from the task's gate and partitions.
func (t *Task) LiveMetrics() LiveMetrics {
	l := &t.lv.live
	m := LiveMetrics{Key: t.cfg.Key, Name: t.cfg.Name, State: State(l.state.Load())}
	if t.cfg.Gate != nil {
		m.Input = t.cfg.Gate.Usage()
	}
	for _, p := range t.cfg.Outputs {
		m.Output = m.Output.Add(p.Usage())
	}
	started := l.started.Load()
	if started == 0 {
		m.InputWatermark, m.OutputWatermark = eventtime.MinWatermark, eventtime.MinWatermark
		return m
	}
	now := time.Duration(mono(time.Now()) - started)
	var v liveValues
	late := make([]int64, len(t.lv.lateOps))
	l.load(&v, late)
	if m.State == Running {
		switch v.waiting {
		case waitingIdle:
			v.idle += max(0, now-v.elapsed)
			v.elapsed = max(v.elapsed, now)
		case waitingBackPressured:
			v.backPressured += max(0, now-v.elapsed)
			v.elapsed = max(v.elapsed, now)
		default:
			var blocked time.Duration
			for _, p := range t.cfg.Outputs {
				blocked = max(blocked, p.BackPressuredFor())
			}
			if blocked > 0 && now > v.elapsed {
				// Busy from the last publication until the write
				// started waiting.
				v.backPressured += min(blocked, now-v.elapsed)
				v.elapsed = now
			}
		}
	}
	m.Elapsed = v.elapsed
	m.RecordsIn, m.RecordsOut = v.recordsIn, v.recordsOut
	m.BytesIn, m.BytesOut = v.bytesIn, v.bytesOut
	m.Idle, m.BackPressured = v.idle, v.backPressured
	m.Busy = max(0, v.elapsed-v.idle-v.backPressured)
	m.InputWatermark, m.OutputWatermark = v.inWM, v.outWM
	if len(late) > 0 {
		m.Operators = make([]OperatorMetrics, len(late))
		for i, n := range late {
			m.Operators[i] = OperatorMetrics{Name: t.lv.lateNames[i], LateRecordsDropped: n}
		}
	}
	return m
}

func waitKindOf(backPressure bool) waitKind {
	if backPressure {
		return waitingBackPressured
	}
	return waitingIdle
}
