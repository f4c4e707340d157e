package weir

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/jobmaster"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// TwoPhaseCommitter is a transactional sink (Flink's
// TwoPhaseCommitSinkFunction): values are written into a transaction; at a
// checkpoint the open transaction is pre-committed and its handle becomes
// part of the checkpoint; once the checkpoint completes it is committed.
// After a failure, transactions of the checkpoint the job restores from
// are committed again (Commit must be idempotent) and the open one is
// aborted, so every value reaches the sink's destination exactly once.
//
// One committer value is created per subtask (see TwoPhaseCommitSink) and
// used from that subtask's goroutine only.
type TwoPhaseCommitter[T, Txn any] interface {
	// Begin starts a new transaction.
	Begin() (Txn, error)
	// Write adds v to txn.
	Write(txn Txn, v T) error
	// PreCommit makes txn durable but invisible (flush, fsync).
	PreCommit(txn Txn) error
	// Commit makes a pre-committed txn visible. It must be idempotent: it
	// may run again for a transaction already committed.
	Commit(txn Txn) error
	// Abort discards txn. It must tolerate a transaction that is already
	// gone.
	Abort(txn Txn) error
}

// TwoPhaseCommitSink writes s through one committer per subtask
// (newCommitter is called once per subtask and attempt). txnCodec
// serializes transaction handles into the sink's checkpointed state (nil:
// the built-in codec of Txn; Execute fails if it has none and the job
// checkpoints).
func TwoPhaseCommitSink[T, Txn any](s *Stream[T], txnCodec codec.Codec[Txn], newCommitter func(subtask, parallelism int) (TwoPhaseCommitter[T, Txn], error)) *Sink {
	final := s.env.finalCommits()
	if txnCodec == nil {
		txnCodec = defaultCodec[Txn]()
	}
	var sink *Sink
	s.env.check(func() error {
		what := "sink " + sink.n.Name
		switch {
		case newCommitter == nil:
			return fmt.Errorf("weir: %s: nil newCommitter", what)
		case s.env.cfg.ckpt != nil && txnCodec == nil:
			return noCodec[Txn](what, "its open transactions are checkpointed", "pass one to TwoPhaseCommitSink as txnCodec")
		}
		return nil
	})
	sink = addSink(s, "two-phase-commit sink", func(rc *graph.Subtask) (collector[T], task.Operator, error) {
		c, err := newCommitter(rc.Index, rc.Parallelism)
		if err != nil {
			return nil, nil, err
		}
		o := &twoPhaseOp[T, Txn]{opBase: base(rc), c: c, tc: txnCodec, final: final}
		return o, o, nil
	})
	sink.n.Stateful = true
	return sink
}

// txnFormat names the format of the sink's state elements: a checkpoint ID
// and a transaction handle of the transaction codec.
const txnFormat = "2pc-transaction"

// txnStateCodec is the codec of the sink's state elements, whose identity
// is txnFormat over tc's: a sink restored with a transaction codec of
// another identity (another Txn type, another connector's sink under the
// same UID) is refused before it commits or aborts anything
// (state.SchemaError, naming the sink and both codecs), unless tc is a
// codec.Migrating that reads the restored one, whose handles are then
// migrated.
func txnStateCodec[Txn any](tc codec.Codec[Txn]) codec.Codec[[]byte] {
	c := codec.WithIdentity(codec.Bytes(), codec.FormatIdentity(txnFormat, tc))
	if m, ok := tc.(codec.Migrating[Txn]); ok {
		return migratingTxns[Txn]{Codec: c, m: m}
	}
	return c
}

// migratingTxns migrates the state elements of a transaction codec that
// tc reads (codec.Migrating).
type migratingTxns[Txn any] struct {
	codec.Codec[[]byte]
	m codec.Migrating[Txn]
}

func (c migratingTxns[Txn]) Identity() codec.Identity { return codec.IdentityOf(c.Codec) }

func (c migratingTxns[Txn]) Reads(old codec.Identity) bool {
	inner, ok := txnCodecIdentity(old)
	return ok && c.m.Reads(inner)
}

func (c migratingTxns[Txn]) DecodeFrom(old codec.Identity, src []byte) ([]byte, error) {
	inner, ok := txnCodecIdentity(old)
	if !ok || len(src) < 8 {
		return nil, fmt.Errorf("not a transaction of %s", old)
	}
	txn, err := c.m.DecodeFrom(inner, src[8:])
	if err != nil {
		return nil, err
	}
	return c.m.Append(slices.Clone(src[:8]), txn), nil
}

// txnCodecIdentity returns the transaction codec's identity inside id, an
// identity of txnStateCodec (see codec.FormatIdentity).
func txnCodecIdentity(id codec.Identity) (codec.Identity, bool) {
	name, ok := strings.CutPrefix(id.Name, txnFormat+"(")
	if !ok {
		return codec.Identity{}, false
	}
	if name, ok = strings.CutSuffix(name, ")"); !ok {
		return codec.Identity{}, false
	}
	inner := codec.Identity{Name: name}
	if id.Version != "" {
		v, open := strings.CutPrefix(id.Version, "(")
		v, closed := strings.CutSuffix(v, ")")
		if !open || !closed || v == "" {
			return codec.Identity{}, false
		}
		inner.Version = v
	}
	return inner, true
}

// pendingTxn is a pre-committed transaction waiting for its checkpoint.
type pendingTxn[Txn any] struct {
	id  barrier.CheckpointID
	txn Txn
}

type twoPhaseOp[T, Txn any] struct {
	opBase
	c       TwoPhaseCommitter[T, Txn]
	tw      TimestampWriter[T, Txn] // c, if it writes timestamps
	tc      codec.Codec[Txn]
	final   *jobmaster.FinalCommits
	current Txn
	open    bool
	pending []pendingTxn[Txn]
	st      *state.OperatorListState[[]byte]
	last    barrier.CheckpointID // the last checkpoint taken (or restored)
	// ckpt: the job checkpoints, so the last transactions are committed by
	// a final checkpoint (finished: the input ended) rather than at the
	// end of the job.
	ckpt     bool
	finished bool
}

// State element: checkpoint id (8 bytes, 0 = the open transaction) + txn.
func (o *twoPhaseOp[T, Txn]) encode(id barrier.CheckpointID, txn Txn) []byte {
	b := codec.Uint64().Append(nil, uint64(id))
	return o.tc.Append(b, txn)
}

func (o *twoPhaseOp[T, Txn]) Open(ctx *task.OperatorContext) error {
	st, err := state.GetOperatorListState(ctx.OperatorState, state.ListDescriptor[[]byte]{Name: "2pc-transactions", Codec: txnStateCodec(o.tc)},
		state.SplitDistribute)
	if err != nil {
		return err // a *state.SchemaError names the sink and both transaction codecs
	}
	o.st = st
	o.last = ctx.RestoredID
	o.tw, _ = o.c.(TimestampWriter[T, Txn])
	if cs, ok := o.c.(ContextSetter); ok && ctx.Context != nil {
		cs.SetContext(ctx.Context)
	}
	o.ckpt = ctx.Checkpointing
	if ctx.Restored {
		elems, err := st.Get()
		if err != nil {
			return err
		}
		// Pre-committed transactions of the restored (completed) checkpoint
		// are committed; open transactions of it are aborted.
		for _, e := range elems {
			if len(e) < 8 {
				return fmt.Errorf("weir: sink %s: corrupt transaction state", o.name)
			}
			id, _ := codec.Uint64().Decode(e[:8])
			txn, err := o.tc.Decode(e[8:])
			if err != nil {
				return fmt.Errorf("weir: sink %s: transaction state: %w", o.name, err)
			}
			if id == 0 {
				if err := o.c.Abort(txn); err != nil {
					return fmt.Errorf("weir: sink %s: aborting a restored transaction: %w", o.name, err)
				}
				continue
			}
			if err := o.c.Commit(txn); err != nil {
				return fmt.Errorf("weir: sink %s: committing a restored transaction: %w", o.name, err)
			}
		}
		if err := st.Update(nil); err != nil {
			return err
		}
	}
	return o.begin()
}

func (o *twoPhaseOp[T, Txn]) begin() error {
	var txn Txn
	var err error
	if b, ok := o.c.(CheckpointBeginner[Txn]); ok {
		txn, err = b.BeginAfter(o.last)
	} else {
		txn, err = o.c.Begin()
	}
	if err != nil {
		return o.fail(fmt.Errorf("begin transaction: %w", err))
	}
	o.current, o.open = txn, true
	return nil
}

func (o *twoPhaseOp[T, Txn]) collect(v T, ts int64) (err error) {
	o.enter()
	if o.tw != nil {
		err = o.tw.WriteTimestamped(o.current, v, ts)
	} else {
		err = o.c.Write(o.current, v)
	}
	if err != nil {
		return o.fail(err)
	}
	return nil
}

func (o *twoPhaseOp[T, Txn]) SnapshotState(id barrier.CheckpointID) error {
	if o.finished {
		// The final checkpoint: the transactions pre-committed at the end
		// of the input become this checkpoint's.
		elems := make([][]byte, 0, len(o.pending))
		for i := range o.pending {
			if o.pending[i].id == 0 {
				o.pending[i].id = id
			}
			elems = append(elems, o.encode(o.pending[i].id, o.pending[i].txn))
		}
		return o.st.Update(elems)
	}
	if err := o.c.PreCommit(o.current); err != nil {
		return o.fail(fmt.Errorf("pre-commit for checkpoint %d: %w", id, err))
	}
	o.pending = append(o.pending, pendingTxn[Txn]{id: id, txn: o.current})
	o.open = false
	o.last = max(o.last, id)
	if err := o.begin(); err != nil {
		return err
	}
	elems := make([][]byte, 0, len(o.pending)+1)
	for _, p := range o.pending {
		elems = append(elems, o.encode(p.id, p.txn))
	}
	elems = append(elems, o.encode(0, o.current))
	return o.st.Update(elems)
}

func (o *twoPhaseOp[T, Txn]) NotifyCheckpointComplete(id barrier.CheckpointID) error {
	n := 0
	for _, p := range o.pending {
		if p.id == 0 || p.id > id {
			break
		}
		if err := o.c.Commit(p.txn); err != nil {
			return o.fail(fmt.Errorf("commit for checkpoint %d: %w", p.id, err))
		}
		n++
	}
	o.pending = slices.Delete(o.pending, 0, n)
	return nil
}

// Finish pre-commits the open transaction. With checkpointing, the task
// then waits for a final checkpoint (NeedsFinalCheckpoint), which takes the
// transactions over and commits them when it completes; a failure before
// that replays from the last checkpoint, and Close aborts them. Without
// checkpointing, everything pending is committed once the whole job has
// finished.
func (o *twoPhaseOp[T, Txn]) Finish() error {
	if err := o.c.PreCommit(o.current); err != nil {
		return o.fail(fmt.Errorf("final pre-commit: %w", err))
	}
	if o.ckpt {
		o.pending = append(o.pending, pendingTxn[Txn]{txn: o.current})
		o.open, o.finished = false, true
		return nil
	}
	// The last transaction belongs to no checkpoint (ID 0).
	txns := append(slices.Clone(o.pending), pendingTxn[Txn]{txn: o.current})
	o.pending, o.open = nil, false
	c := o.c
	o.final.Add(func(commit bool, completed barrier.CheckpointID) error {
		var errs []error
		for _, t := range txns {
			// A transaction of a completed checkpoint is committed even
			// when the job failed: the restore commits it anyway, and
			// aborting it first would lose its values.
			if commit || (t.id != 0 && t.id <= completed) {
				errs = append(errs, c.Commit(t.txn))
			} else {
				errs = append(errs, c.Abort(t.txn))
			}
		}
		return errors.Join(errs...)
	})
	return nil
}

// NeedsFinalCheckpoint implements task.FinalCheckpointOperator: after its
// input ended, a checkpointed sink commits its last transactions through
// a final checkpoint.
func (o *twoPhaseOp[T, Txn]) NeedsFinalCheckpoint() bool { return o.ckpt && o.finished }

// Close aborts the open transaction and the transactions pre-committed at
// the end of the input that no completed checkpoint took over (the job
// replays their values), then closes the committer if it is an io.Closer
// (final commits may still follow).
func (o *twoPhaseOp[T, Txn]) Close() error {
	var errs []error
	if o.open {
		o.open = false
		errs = append(errs, o.c.Abort(o.current))
	}
	for _, p := range o.pending {
		if p.id == 0 {
			errs = append(errs, o.c.Abort(p.txn))
		}
	}
	if c, ok := o.c.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func (e *Environment) finalCommits() *jobmaster.FinalCommits {
	if e.final == nil {
		e.final = &jobmaster.FinalCommits{}
	}
	return e.final
}
