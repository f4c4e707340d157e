package weir

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/eventtime/async"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// AsyncOptions configure AsyncMap. The zero value: 100 requests in
// flight per subtask, no timeout, results in completion order.
type AsyncOptions struct {
	// Capacity bounds the values a subtask holds: requests in flight and
	// results waiting for their turn (0: 100). A subtask whose capacity
	// is used takes no input (back-pressure) until a place frees; its
	// checkpoints and timers go on.
	Capacity int
	// Timeout bounds each request, from its start (0: none). The
	// function's context carries the deadline; a request still running
	// at it fails its value, and the job restarts, unless OnTimeout gives
	// a fallback result. A timeout is at least 1 ms.
	Timeout time.Duration
	// Ordered emits the results in input order. Otherwise a result leaves
	// as soon as it is in, but never across a watermark: the results of
	// the values before a watermark leave before it, those after it
	// after it.
	Ordered bool
}

// ErrAsyncTimeout is the failure of an AsyncMap request that did not
// complete within AsyncOptions.Timeout, with no OnTimeout fallback.
var ErrAsyncTimeout = errors.New("weir: async request timed out")

// AsyncOption is an optional typed setting of AsyncMap (OnTimeout).
type AsyncOption[In, Out any] interface {
	applyAsync(*asyncSettings[In, Out])
}

type asyncSettings[In, Out any] struct {
	onTimeout func(In) (Out, error)
}

type asyncOptionFunc[In, Out any] func(*asyncSettings[In, Out])

func (f asyncOptionFunc[In, Out]) applyAsync(s *asyncSettings[In, Out]) { f(s) }

// OnTimeout gives AsyncMap a fallback for a request that timed out: fn's
// result takes the place of the request's (a late result of the request
// is ignored); an error fails the value, and the job restarts. fn runs in
// the task's goroutine.
func OnTimeout[In, Out any](fn func(v In) (Out, error)) AsyncOption[In, Out] {
	return asyncOptionFunc[In, Out](func(s *asyncSettings[In, Out]) { s.onTimeout = fn })
}

// AsyncMap calls fn for every value of s without waiting for one call to
// return before the next starts (Flink's async I/O): up to
// opts.Capacity calls per subtask run at once, each on its own goroutine,
// and their results come back to the subtask's task, which emits them
// with their value's timestamp (see AsyncOptions for order, capacity and
// timeouts). fn returns the result or an error; an error, or a panic,
// fails the task, and the job restarts.
//
// The values whose calls have not returned, or whose results wait for
// their turn, are part of each checkpoint (the stream's type needs a codec
// then): a restored job calls fn for them again, so its output is
// exactly-once although calls may run twice. fn's context is canceled when
// the job is canceled or restarts, and at the request's deadline; fn must
// return then.
func AsyncMap[In, Out any](s *Stream[In], fn func(ctx context.Context, v In) (Out, error), opts AsyncOptions, more ...AsyncOption[In, Out]) *Stream[Out] {
	var set asyncSettings[In, Out]
	for _, o := range more {
		o.applyAsync(&set)
	}
	cfg := async.Config{Capacity: opts.Capacity, Mode: async.Unordered}
	if opts.Ordered {
		cfg.Mode = async.Ordered
	}
	if opts.Timeout > 0 {
		cfg.Timeout = max(1, int64(math.Ceil(float64(opts.Timeout)/float64(time.Millisecond))))
	}
	var bad error
	switch {
	case opts.Capacity < 0:
		bad = fmt.Errorf("capacity %d is negative", opts.Capacity)
	case opts.Timeout < 0:
		bad = fmt.Errorf("timeout %v is negative", opts.Timeout)
	case fn == nil:
		bad = errors.New("no function")
	}
	out := addOp(s, "async map", func(rc *graph.Subtask, next collector[Out]) (collector[In], task.Operator) {
		o := &asyncOp[In, Out]{opBase: base(rc), fn: fn, onTimeout: set.onTimeout, cfg: cfg, codec: s.codec, next: next}
		return o, o
	})
	if bad == nil {
		bad = cfg.Validate()
	}
	if bad != nil {
		s.env.fail(fmt.Errorf("weir: operator %s: %w", out.n.Name, bad))
	}
	return out
}

// asyncOp is AsyncMap's operator: the queue of eventtime/async, driven by
// the task goroutine; the calls run on worker goroutines, whose results
// come back through the task's mailbox.
type asyncOp[In, Out any] struct {
	opBase
	fn        func(context.Context, In) (Out, error)
	onTimeout func(In) (Out, error)
	cfg       async.Config
	codec     codec.Codec[In]
	next      collector[Out]

	ctx    *task.OperatorContext
	q      *async.Queue[In, Out]
	st     *state.OperatorListState[[]byte]
	base   context.Context // the calls' context: canceled with the task or at Close
	cancel context.CancelFunc
	reqs   chan async.Request[In]
	wg     sync.WaitGroup
	// idle counts the workers waiting for a request, minus the requests
	// sent to them and not received yet.
	idle  atomic.Int64
	inbox asyncInbox[Out]
	post  func() error // posts the mail that takes the results in
	armed int64        // the processing-time callback requested (math.MaxInt64: none)

	issueBuf []async.Request[In]
	outBuf   []async.Output[Out]
	toBuf    []async.Request[In]
	results  []asyncResult[Out]
	snapBuf  []async.Element[In]
}

// asyncResult is what a worker hands back for one request.
type asyncResult[Out any] struct {
	id       async.ID
	v        Out
	err      error
	deadline int64
}

// asyncInbox collects the workers' results until the task takes them in.
// Workers post one mail for a batch: the first result after the task
// emptied the inbox posts it.
type asyncInbox[Out any] struct {
	mu struct {
		sync.Mutex
		res    []asyncResult[Out]
		posted bool
	}
	wake chan struct{} // capacity 1: a result came (Finish waits on it)
}

func (b *asyncInbox[Out]) put(r asyncResult[Out], post func() error) {
	b.mu.Lock()
	b.mu.res = append(b.mu.res, r)
	first := !b.mu.posted
	b.mu.posted = true
	b.mu.Unlock()
	if first {
		// Fails only once the task stopped: nobody waits for r then.
		_ = post()
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take swaps the inbox's results with dst (emptied) and returns them.
func (b *asyncInbox[Out]) take(dst []asyncResult[Out]) []asyncResult[Out] {
	b.mu.Lock()
	res := b.mu.res
	b.mu.res, b.mu.posted = dst[:0], false
	b.mu.Unlock()
	return res
}

const asyncStateName = "async-in-flight"

func (o *asyncOp[In, Out]) Open(ctx *task.OperatorContext) (err error) {
	o.enter()
	defer o.catch(&err)
	o.ctx = ctx
	q, err := async.New[In, Out](o.cfg)
	if err != nil {
		return err
	}
	o.q, o.armed = q, math.MaxInt64
	parent := ctx.Context
	if parent == nil {
		parent = context.Background()
	}
	o.base, o.cancel = context.WithCancel(parent)
	o.reqs = make(chan async.Request[In], q.Config().Capacity)
	o.inbox.wake = make(chan struct{}, 1)
	drain := o.drain
	o.post = func() error { return ctx.Post(drain) }
	if o.codec == nil {
		if ctx.Checkpointing {
			return fmt.Errorf("the input's type has no codec, so the values in flight cannot be checkpointed (call WithCodec on the stream)")
		}
		return nil
	}
	// Each element is a value's timestamp (8 bytes) and its encoding.
	inFlight := codec.WithIdentity(codec.Bytes(), codec.FormatIdentity("async-element", o.codec))
	st, err := state.GetOperatorListState(ctx.OperatorState, state.ListDescriptor[[]byte]{Name: asyncStateName, Codec: inFlight}, state.SplitDistribute)
	if err != nil {
		return err
	}
	o.st = st
	if !ctx.Restored {
		return nil
	}
	els, err := st.Get()
	if err != nil {
		return err
	}
	now := o.now()
	for _, e := range els {
		if len(e) < 8 {
			return fmt.Errorf("restoring the values in flight: an element of %d bytes", len(e))
		}
		v, err := o.codec.Decode(e[8:])
		if err != nil {
			return fmt.Errorf("restoring the values in flight: %w", err)
		}
		o.q.Add(v, int64(binary.BigEndian.Uint64(e)), now)
	}
	// Issued again; their results come through the mailbox once the task
	// runs.
	o.issue()
	o.ctx.BlockInput(o.q.Full())
	return nil
}

// now is the processing time in ms, as the queue's deadlines count it.
func (o *asyncOp[In, Out]) now() int64 {
	if o.cfg.Timeout == 0 {
		return 0
	}
	return o.ctx.ProcessingTime()
}

func (o *asyncOp[In, Out]) collect(v In, ts int64) error {
	o.enter()
	o.q.Add(v, ts, o.now())
	o.issue()
	if o.q.Full() {
		o.ctx.BlockInput(true)
	}
	return nil
}

// issue starts the requests the queue issued: each goes to an idle
// worker, or to a new one. Workers are only as many as requests ran at
// once: the capacity, and more only while calls that timed out have not
// returned.
func (o *asyncOp[In, Out]) issue() {
	o.issueBuf = o.q.TakeIssued(o.issueBuf[:0])
	for _, r := range o.issueBuf {
		if o.idle.Add(-1) >= 0 {
			select {
			case o.reqs <- r:
				continue
			default:
			}
		}
		o.idle.Add(1)
		o.wg.Add(1)
		go o.work(r)
	}
	clear(o.issueBuf)
	if o.cfg.Timeout > 0 {
		if d, ok := o.q.NextDeadline(); ok && d < o.armed {
			o.armed = d
			o.ctx.RequestProcessingTime(d)
		}
	}
}

// work runs first, then the requests sent to idle workers, until Close.
func (o *asyncOp[In, Out]) work(first async.Request[In]) {
	defer o.wg.Done()
	o.call(first)
	o.idle.Add(1)
	for r := range o.reqs {
		o.call(r)
		o.idle.Add(1)
	}
}

// call runs fn for one request on a worker goroutine and hands the result
// to the inbox.
func (o *asyncOp[In, Out]) call(r async.Request[In]) {
	if o.base.Err() != nil {
		return
	}
	res := asyncResult[Out]{id: r.ID, deadline: r.Deadline}
	ctx := o.base
	if o.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(o.base, time.UnixMilli(r.Deadline))
		defer cancel()
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				res.err = &task.Error{Operator: o.name, Err: &task.PanicError{Value: p, Stack: debug.Stack()}}
			}
		}()
		res.v, res.err = o.fn(ctx, r.Value)
	}()
	if o.base.Err() != nil {
		return // the task is gone or going: nobody takes the result
	}
	o.inbox.put(res, o.post)
}

// drain takes the workers' results in (a mail, or Finish).
func (o *asyncOp[In, Out]) drain() (err error) {
	o.enter()
	defer o.catch(&err)
	o.results = o.inbox.take(o.results)
	if len(o.results) == 0 {
		return nil
	}
	now := o.now()
	for i := range o.results {
		r := &o.results[i]
		if r.err != nil {
			if !o.q.Known(r.id) {
				continue // a late failure of a request that timed out
			}
			if errors.Is(r.err, context.DeadlineExceeded) && r.deadline <= o.ctx.ProcessingTime() {
				// The request gave up at its deadline before the
				// task's timer saw it.
				if err := o.expire(max(now, r.deadline)); err != nil {
					return err
				}
				continue
			}
			var te *task.Error
			if errors.As(r.err, &te) {
				return r.err
			}
			return o.fail(r.err)
		}
		o.q.Complete(r.id, r.v, now)
	}
	clear(o.results)
	return o.flush()
}

// expire times out the requests due at now: their fallback, or a
// failure.
func (o *asyncOp[In, Out]) expire(now int64) error {
	o.toBuf = o.q.Timeout(now, o.toBuf[:0])
	defer clear(o.toBuf)
	for _, r := range o.toBuf {
		if o.onTimeout == nil {
			return o.fail(fmt.Errorf("%w after %d ms", ErrAsyncTimeout, o.cfg.Timeout))
		}
		v, err := o.onTimeout(r.Value)
		if err != nil {
			return o.fail(err)
		}
		o.q.Complete(r.ID, v, now)
	}
	return nil
}

// flush starts what the queue issued, emits what left it and tells the
// task whether it may take input.
func (o *asyncOp[In, Out]) flush() error {
	o.issue()
	o.outBuf = o.q.TakeOut(o.outBuf[:0])
	defer clear(o.outBuf)
	for _, out := range o.outBuf {
		var err error
		if out.Watermark {
			err = o.ctx.EmitWatermark(out.Timestamp)
		} else {
			err = o.next.collect(out.Value, out.Timestamp)
		}
		o.enter()
		if err != nil {
			return err
		}
	}
	o.ctx.BlockInput(o.q.Full())
	return nil
}

// ProcessWatermark queues the watermark behind the values before it; it
// leaves the operator with them (flush).
func (o *asyncOp[In, Out]) ProcessWatermark(wm int64) (_ bool, err error) {
	o.enter()
	defer o.catch(&err)
	o.q.Watermark(wm)
	return false, o.flush()
}

func (o *asyncOp[In, Out]) ProcessWatermarkStatus(eventtime.Status) (bool, error) { return true, nil }

func (o *asyncOp[In, Out]) OnProcessingTime(now int64) (err error) {
	o.enter()
	defer o.catch(&err)
	o.armed = math.MaxInt64
	if err := o.expire(now); err != nil {
		return err
	}
	return o.flush()
}

// SnapshotState writes the values not yet emitted, each as its timestamp
// and its encoding.
func (o *asyncOp[In, Out]) SnapshotState(barrier.CheckpointID) error {
	if o.st == nil {
		return fmt.Errorf("weir: operator %s: the input's type has no codec, so the values in flight cannot be checkpointed (call WithCodec)", o.name)
	}
	o.snapBuf = o.q.Snapshot(o.snapBuf[:0])
	els := make([][]byte, len(o.snapBuf))
	for i, e := range o.snapBuf {
		b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(e.Timestamp))
		els[i] = o.codec.Append(b, e.Value)
	}
	clear(o.snapBuf)
	return o.st.Update(els)
}

// Finish waits until every value's result left the operator (the input
// ended: nothing else comes), timing requests out as they are due.
func (o *asyncOp[In, Out]) Finish() error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := o.drain(); err != nil {
			return err
		}
		if o.q.Empty() {
			return nil
		}
		var due <-chan time.Time
		if d, ok := o.q.NextDeadline(); ok {
			wait := time.Until(time.UnixMilli(d))
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			due = timer.C
		}
		select {
		case <-o.inbox.wake:
		case <-due:
			if err := o.OnProcessingTime(o.ctx.ProcessingTime()); err != nil {
				return err
			}
		case <-o.base.Done():
			return o.base.Err()
		}
	}
}

// Close cancels the calls still running and waits for the workers.
func (o *asyncOp[In, Out]) Close() error {
	if o.cancel == nil {
		return nil
	}
	o.cancel()
	close(o.reqs)
	o.wg.Wait()
	o.cancel = nil
	return nil
}
