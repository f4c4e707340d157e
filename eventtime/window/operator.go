package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

var (
	// ErrNoTimestamp is returned by ProcessElement for an element of
	// event-time windows whose timestamp is math.MinInt64 (no timestamp).
	ErrNoTimestamp = errors.New("window: element without a timestamp in event-time windows")
	// ErrOutOfRange is returned by ProcessElement when an element's window
	// would start or end outside the int64 range.
	ErrOutOfRange = errors.New("window: window outside the int64 range")
)

// Config configures an Operator. Assigner is required; the zero values of
// the other fields are their defaults.
type Config struct {
	// Assigner assigns elements to windows.
	Assigner Assigner
	// Time is the clock of the windows: EventTime (default) or
	// ProcessingTime. Global windows take EventTime only (they follow no
	// clock; their triggers may).
	Time Time
	// Trigger decides when windows fire; the zero Trigger is the
	// assigner's default.
	Trigger Trigger
	// AllowedLateness (ms, ≥ 0) keeps event-time windows alive after their
	// end: an element behind the watermark still joins a window until the
	// watermark passes the window's MaxTimestamp + AllowedLateness, and
	// fires it again. It has no effect on other windows.
	AllowedLateness int64
	// SideOutputLateData sends late elements (in no live window, and
	// behind the watermark by more than the lateness) to Output.Late;
	// otherwise they are dropped and counted (LateRecordsDropped).
	SideOutputLateData bool
	// Clock returns the current processing time (ms), the clock the
	// driver advances processing time with. Processing-time windows need
	// it: an element is assigned by the time it arrives. (Otherwise only a
	// processing-time trigger on merging windows reads the clock; without
	// Clock it reads the time of the latest AdvanceProcessingTime.)
	Clock func() int64
	// Name tells apart the states of several window operators sharing one
	// keyed backend; "" means "window". It must not contain '/'.
	Name string
}

// Validate reports whether c is a usable configuration.
func (c Config) Validate() error {
	if err := c.Assigner.validate(); err != nil {
		return err
	}
	switch c.Time {
	case EventTime:
	case ProcessingTime:
		if c.Assigner.kind == assignerGlobal {
			return errors.New("window: global windows follow no clock; use Time EventTime and pick a trigger")
		}
		if c.Clock == nil {
			return errors.New("window: processing-time windows need a Clock")
		}
	default:
		return fmt.Errorf("window: unknown time %d", c.Time)
	}
	if err := c.Trigger.validate(c.Assigner, c.Time); err != nil {
		return err
	}
	if c.AllowedLateness < 0 {
		return fmt.Errorf("window: allowed lateness %d, want ≥ 0", c.AllowedLateness)
	}
	if strings.ContainsRune(c.Name, '/') {
		return fmt.Errorf("window: operator name %q contains '/'", c.Name)
	}
	return nil
}

// Output receives what an Operator emits. Its methods are called from the
// Operator's methods, on the caller's goroutine, and must not call back
// into the Operator; key is valid only during the call. An error stops
// the Operator's method and is returned by it.
type Output[IN, OUT any] interface {
	// Emit receives one result of key's window w. Its timestamp is
	// w.MaxTimestamp().
	Emit(key []byte, w Window, result OUT) error
	// Late receives a late element when Config.SideOutputLateData is set.
	Late(key []byte, ts int64, v IN) error
}

// Operator is the core of a keyed window operator (Flink's
// WindowOperator): it assigns elements to windows, keeps their contents
// and trigger state in a keyed state backend, fires them through its
// trigger and a TimerService, and cleans them up. It is pure: elements,
// watermarks and processing time come in as method calls, results leave
// through Output; it starts no goroutine and reads no clock but
// Config.Clock. An Operator is used from one goroutine, like its backend.
type Operator[IN, OUT any] struct {
	c      core
	fn     windowFunc[IN, OUT]
	out    Output[IN, OUT]
	emitW  Window
	emitFn func(OUT) error
}

// New returns the window operator configured by cfg over the keyed backend
// b, computing results with fn and emitting them to out. If b was restored
// from a snapshot, the operator continues from it: its windows, trigger
// state, sessions and timers are all in b (restore b first, then call
// New). Its watermark starts at math.MinInt64.
func New[IN, OUT any](b state.KeyedBackend, cfg Config, fn Function[IN, OUT], out Output[IN, OUT]) (*Operator[IN, OUT], error) {
	if b == nil {
		return nil, errors.New("window: no keyed backend")
	}
	if out == nil {
		return nil, errors.New("window: no output")
	}
	if fn.build == nil {
		return nil, errors.New("window: no window function")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	wf, err := fn.build()
	if err != nil {
		return nil, err
	}
	if cfg.Assigner.merging() {
		if err := wf.canMerge(); err != nil {
			return nil, err
		}
	}
	name := cfg.Name
	if name == "" {
		name = "window"
	}
	op := &Operator[IN, OUT]{fn: wf, out: out}
	c := &op.c
	c.b = b
	c.rng = b.KeyGroupRange()
	c.assigner = cfg.Assigner
	c.time = cfg.Time
	c.eventTime = cfg.Time == EventTime && cfg.Assigner.kind != assignerGlobal
	c.trigger = cfg.Trigger.resolve(cfg.Assigner, cfg.Time)
	c.lateness = cfg.AllowedLateness
	c.timersFollowContents = timersFollowContents(cfg.Assigner, c.trigger, c.eventTime, c.lateness)
	c.clock = cfg.Clock
	c.store = op
	if c.timers, err = eventtime.NewTimerService(b, name); err != nil {
		return nil, err
	}
	prefix := "_window/" + name + "/"
	if c.contentsID, err = wf.register(b, prefix+"contents"); err != nil {
		return nil, fmt.Errorf("window: %w", err)
	}
	for _, s := range []struct {
		id     *stateID
		name   string
		format string // of the values: a big-endian int64, a window's sessions
	}{
		{&c.countID, "count", "window-int"},
		{&c.fireID, "fire-time", "window-int"},
		{&c.sessionsID, "sessions", "window-sessions"},
	} {
		if *s.id, err = state.RegisterStateFormat(b, prefix+s.name, state.KindValue, codec.Identity{Name: s.format, Version: "1"}); err != nil {
			return nil, fmt.Errorf("window: %w", err)
		}
	}
	c.onEventTimer = func(t eventtime.Timer) error { return c.onTimer(t, true) }
	c.onProcTimer = func(t eventtime.Timer) error { return c.onTimer(t, false) }
	op.emitFn = func(r OUT) error { return op.out.Emit(op.c.key, op.emitW, r) }
	op.c.sideOutput = cfg.SideOutputLateData
	return op, nil
}

// ProcessElement handles element v of the record key key (serialized, in
// key group keyGroup) with event timestamp ts (math.MinInt64: none; only
// event-time windows need one): it adds v to each of its windows that is
// not late, fires those whose trigger says so (in assignment order), and
// sends v to Output.Late (or drops it) if it is late and no window took
// it. It sets the backend's current key (to keys of its own); a caller
// sharing the backend sets its key again afterwards.
func (op *Operator[IN, OUT]) ProcessElement(key []byte, keyGroup int, ts int64, v IN) error {
	c := &op.c
	if c.eventTime && ts == math.MinInt64 {
		return ErrNoTimestamp
	}
	if err := c.setKey(key, keyGroup); err != nil {
		return err
	}
	t := ts
	if c.time == ProcessingTime {
		t = c.now()
	}
	wins, err := c.assigner.assign(c.wins[:0], t)
	c.wins = wins
	if err != nil {
		return err
	}
	taken := false
	if c.assigner.merging() {
		if err := c.loadSessions(); err != nil {
			return err
		}
		for _, n := range wins {
			r, err := c.addSession(n)
			if err != nil {
				return err
			}
			if c.isWindowLate(r) {
				c.removeSession(r)
				if err := c.clearContents(r); err != nil {
					return err
				}
				continue
			}
			taken = true
			if err := op.processWindow(r, ts, v); err != nil {
				return err
			}
		}
		if err := c.storeSessions(); err != nil {
			return err
		}
	} else {
		for _, w := range wins {
			if c.isWindowLate(w) {
				continue
			}
			taken = true
			if err := op.processWindow(w, ts, v); err != nil {
				return err
			}
		}
	}
	if taken || !c.isElementLate(ts) {
		return nil
	}
	if c.sideOutput {
		return op.out.Late(c.key, ts, v)
	}
	c.dropped++
	return nil
}

func (op *Operator[IN, OUT]) processWindow(w Window, ts int64, v IN) error {
	c := &op.c
	c.useWindow(w)
	existed, err := op.fn.add(c.b, c.contentsID, v)
	if err != nil {
		return err
	}
	if existed && c.timersFollowContents {
		// The window's timers are pending: registering them again would
		// find them in the timer service.
		if mt := w.MaxTimestamp(); c.trigger.kind != triggerEventTime || mt > c.timers.CurrentWatermark() {
			return nil
		}
	}
	res, err := c.triggerOnElement(w, ts)
	if err != nil {
		return err
	}
	if res.fire() {
		if err := c.emit(w); err != nil {
			return err
		}
	}
	if res.purge() {
		if err := c.clearContents(w); err != nil {
			return err
		}
	}
	return c.registerCleanupTimer(w)
}

// AdvanceWatermark moves event time to wm and fires every due event-time
// timer (window firings and cleanups) in timer order: timestamp, key,
// window. The caller forwards the watermark downstream afterwards.
func (op *Operator[IN, OUT]) AdvanceWatermark(wm int64) error {
	return op.c.timers.AdvanceWatermark(wm, op.c.onEventTimer)
}

// AdvanceProcessingTime moves processing time to now and fires every due
// processing-time timer, like AdvanceWatermark.
func (op *Operator[IN, OUT]) AdvanceProcessingTime(now int64) error {
	return op.c.timers.AdvanceProcessingTime(now, op.c.onProcTimer)
}

// PrepareSnapshot writes the operator's timers into its backend (they are
// kept in memory between snapshots). Call it before snapshotting the
// backend.
func (op *Operator[IN, OUT]) PrepareSnapshot() error { return op.c.timers.Flush() }

// NextProcessingTime returns the time of the earliest processing-time
// timer, if any: the driver calls AdvanceProcessingTime when its clock
// reaches it.
func (op *Operator[IN, OUT]) NextProcessingTime() (int64, bool) {
	return op.c.timers.NextProcessingTime()
}

// CurrentWatermark returns the operator's event time (math.MinInt64 until
// the first AdvanceWatermark).
func (op *Operator[IN, OUT]) CurrentWatermark() int64 { return op.c.timers.CurrentWatermark() }

// LateRecordsDropped counts the late elements dropped (Flink's
// numLateRecordsDropped): those that would have gone to Output.Late with
// Config.SideOutputLateData.
func (op *Operator[IN, OUT]) LateRecordsDropped() int64 { return op.c.dropped }

// emitContents implements windowStore.
func (op *Operator[IN, OUT]) emitContents(raw []byte, w Window) error {
	op.emitW = w
	return op.fn.emit(raw, op.c.key, w, op.emitFn)
}

// mergeContents implements windowStore.
func (op *Operator[IN, OUT]) mergeContents(dst []byte, parts [][]byte) ([]byte, error) {
	return op.fn.merge(dst, parts)
}

type stateID = state.StateID

// windowStore is the typed part of the operator that the untyped core
// calls.
type windowStore interface {
	emitContents(raw []byte, w Window) error
	mergeContents(dst []byte, parts [][]byte) ([]byte, error)
}

type keyMode uint8

const (
	keyUnset keyMode = iota
	keyRecord
	keyWindow
)

// core is the part of the operator that does not depend on the element
// and result types.
type core struct {
	b          state.KeyedBackend
	rng        keygroup.Range // b's key groups
	timers     *eventtime.TimerService
	assigner   Assigner
	time       Time
	eventTime  bool // event-time windows (tumbling, sliding, session)
	trigger    Trigger
	lateness   int64
	sideOutput bool
	clock      func() int64
	store      windowStore
	dropped    int64

	// timersFollowContents: a window that has contents has its trigger
	// and cleanup timers pending (see timersFollowContents).
	timersFollowContents bool

	contentsID, countID, fireID, sessionsID stateID

	onEventTimer, onProcTimer eventtime.TimerFunc

	// The record key being processed, and which key the backend has.
	key  []byte
	kg   int
	cur  keyMode
	curW Window

	// keys sets the backend's keys by value (nil: serialized, as wkey);
	// typed reports that it holds the record key.
	keys  keyer
	typed bool

	wkey     []byte   // record key | window
	nsbuf    []byte   // window encoding
	ibuf     []byte   // int64 encoding
	wins     []Window // windows of the element
	sessions []Window // the key's sessions, by start
	merged   []Window
	parts    [][]byte
	partBuf  []byte
	mergeBuf []byte
	sessBuf  []byte
	dirty    bool // sessions changed since loadSessions

	// registered is the latest timer registered for the current record
	// key, valid until a timer is deleted or the key changes: a trigger
	// and the cleanup often register the same timer for one element.
	registered struct {
		valid, event bool
		w            Window
		t            int64
	}
}

func (c *core) setKey(key []byte, kg int) error {
	if !c.rng.Contains(kg) {
		return &state.KeyGroupError{Group: kg, Range: c.rng}
	}
	c.key = append(c.key[:0], key...)
	c.kg = kg
	c.cur = keyUnset
	c.registered.valid = false
	c.typed = c.keys != nil && c.keys.setKey(key)
	return nil
}

// useKey makes the record key the backend's current key.
func (c *core) useKey() {
	if c.cur != keyRecord {
		if c.typed {
			c.keys.useKey(c.kg)
		} else {
			mustSetKey(c.b.SetCurrentKey(c.key, c.kg))
		}
		c.cur = keyRecord
	}
}

// useWindow makes the key of the record key's window w current: record key
// | encoded window, in the record key's key group.
func (c *core) useWindow(w Window) {
	if c.cur != keyWindow || c.curW != w {
		if c.typed {
			c.keys.useWindow(w, c.kg)
		} else {
			c.wkey = appendWindow(append(c.wkey[:0], c.key...), w)
			mustSetKey(c.b.SetCurrentKey(c.wkey, c.kg))
		}
		c.cur, c.curW = keyWindow, w
	}
}

// timersFollowContents reports whether, with this assigner and trigger, a
// window's contents exist exactly while its timers are pending, so that an
// element added to existing contents need not register them again (the
// timer service would find them there: a lookup per element saved). The
// first element of a window registers the trigger's timer at its
// MaxTimestamp and the cleanup timer; the cleanup clears the contents.
// It holds when the trigger's firing also ends the contents: the default
// event-time trigger when it purges or when there is no allowed lateness
// (the cleanup is then at the same time), and the processing-time trigger
// on processing-time windows (whose cleanup is at MaxTimestamp). Merging
// windows move timers when they merge and are left out.
//
// It survives a restore: the timers are keyed state flushed with the
// contents at every snapshot.
func timersFollowContents(a Assigner, t Trigger, eventTime bool, lateness int64) bool {
	if a.merging() {
		return false
	}
	switch t.kind {
	case triggerEventTime:
		return eventTime && (t.purging || lateness == 0)
	case triggerProcessingTime:
		return !eventTime
	}
	return false
}

func (c *core) now() int64 {
	if c.clock != nil {
		return c.clock()
	}
	return c.timers.CurrentProcessingTime()
}

func (c *core) getInt(id stateID) (int64, bool, error) {
	raw, ok, err := c.b.Get(id, nil)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(raw) != 8 {
		return 0, false, fmt.Errorf("%w: trigger state of %d bytes", state.ErrCorruptState, len(raw))
	}
	return int64(binary.BigEndian.Uint64(raw)), true, nil
}

func (c *core) putInt(id stateID, v int64) error {
	c.ibuf = binary.BigEndian.AppendUint64(c.ibuf[:0], uint64(v))
	return c.b.Put(id, nil, c.ibuf)
}

func (c *core) registerEventTimer(w Window, t int64) error {
	return c.register(true, w, t)
}

func (c *core) registerProcessingTimer(w Window, t int64) error {
	return c.register(false, w, t)
}

func (c *core) register(event bool, w Window, t int64) error {
	r := &c.registered
	if r.valid && r.event == event && r.w == w && r.t == t {
		return nil
	}
	c.nsbuf = appendWindow(c.nsbuf[:0], w)
	d := eventtime.TimerProcessingTime
	if event {
		d = eventtime.TimerEventTime
	}
	err := c.timers.RegisterTimerFor(d, c.key, c.kg, t, c.nsbuf)
	r.valid, r.event, r.w, r.t = err == nil, event, w, t
	return err
}

func (c *core) deleteEventTimer(w Window, t int64) error {
	c.registered.valid = false
	c.useKey()
	c.nsbuf = appendWindow(c.nsbuf[:0], w)
	return c.timers.DeleteEventTimeTimer(t, c.nsbuf)
}

func (c *core) deleteProcessingTimer(w Window, t int64) error {
	c.registered.valid = false
	c.useKey()
	c.nsbuf = appendWindow(c.nsbuf[:0], w)
	return c.timers.DeleteProcessingTimeTimer(t, c.nsbuf)
}

// cleanupTime is when w is removed: for event-time windows its
// MaxTimestamp plus the allowed lateness, at most math.MaxInt64; for
// others its MaxTimestamp.
func (c *core) cleanupTime(w Window) int64 {
	if c.eventTime {
		return addSat(w.MaxTimestamp(), c.lateness)
	}
	return w.MaxTimestamp()
}

// isWindowLate reports whether the watermark reached w's cleanup time.
func (c *core) isWindowLate(w Window) bool {
	return c.eventTime && c.cleanupTime(w) <= c.timers.CurrentWatermark()
}

// isElementLate reports whether an element at ts is behind the watermark
// by more than the allowed lateness.
func (c *core) isElementLate(ts int64) bool {
	return c.eventTime && addSat(ts, c.lateness) <= c.timers.CurrentWatermark()
}

// registerCleanupTimer registers the timer that removes w (none for a
// window that lives for ever).
func (c *core) registerCleanupTimer(w Window) error {
	t := c.cleanupTime(w)
	if t == math.MaxInt64 {
		return nil
	}
	if c.eventTime {
		return c.registerEventTimer(w, t)
	}
	return c.registerProcessingTimer(w, t)
}

func (c *core) deleteCleanupTimer(w Window) error {
	t := c.cleanupTime(w)
	if t == math.MaxInt64 {
		return nil
	}
	if c.eventTime {
		return c.deleteEventTimer(w, t)
	}
	return c.deleteProcessingTimer(w, t)
}

// emit emits the result of w's contents, if it has any.
func (c *core) emit(w Window) error {
	c.useWindow(w)
	raw, ok, err := c.b.Get(c.contentsID, nil)
	if err != nil || !ok {
		return err
	}
	return c.store.emitContents(raw, w)
}

func (c *core) clearContents(w Window) error {
	c.useWindow(w)
	return c.b.Clear(c.contentsID)
}

// onTimer runs the timer t of the record key t.Key for its window.
func (c *core) onTimer(t eventtime.Timer, event bool) error {
	if err := c.setKey(t.Key, t.KeyGroup); err != nil {
		return err
	}
	c.cur = keyRecord // the timer service set it
	w, err := decodeWindow(t.Namespace)
	if err != nil {
		return err
	}
	if c.assigner.merging() {
		if err := c.loadSessions(); err != nil {
			return err
		}
		if c.sessionIndex(w) < 0 {
			return nil // merged away or cleaned up
		}
	}
	var res triggerResult
	if event {
		if res, err = c.triggerOnEventTime(w, t.Timestamp); err != nil {
			return err
		}
	} else {
		res = c.triggerOnProcessingTime(w, t.Timestamp)
	}
	if res.fire() {
		if err := c.emit(w); err != nil {
			return err
		}
	}
	if res.purge() {
		if err := c.clearContents(w); err != nil {
			return err
		}
	}
	if event == c.eventTime && t.Timestamp == c.cleanupTime(w) {
		if err := c.clearContents(w); err != nil {
			return err
		}
		if err := c.triggerClear(w); err != nil {
			return err
		}
		if c.assigner.merging() {
			c.removeSession(w)
			return c.storeSessions()
		}
	}
	return nil
}
