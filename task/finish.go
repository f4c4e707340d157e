package task

import (
	"context"
	"errors"
	"fmt"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/network/wire"
)

// This file is how a task ends when it takes part in checkpoints after
// tasks finished (Flink's FLIP-147): a trigger that reaches a task whose
// upstream tasks all finished takes effect at the end of its input; a task
// with an operator that must commit what it holds waits, after its input
// ended, for a final checkpoint; a task restored as finished runs nothing;
// and a finished task says so, so that the coordinator stops counting on
// it and records it in later checkpoints.

// FinalCheckpointOperator is an Operator that wants a checkpoint after its
// input ended (a two-phase-commit sink commits its last transactions when
// that checkpoint completes): its task, once its operators finished,
// sends end of data downstream, asks for a checkpoint, takes it when
// triggered, and ends only after one has completed.
type FinalCheckpointOperator interface {
	Operator
	// NeedsFinalCheckpoint reports whether the operator wants the final
	// checkpoint (checkpointing on, something to commit).
	NeedsFinalCheckpoint() bool
}

// finalState is a task's progress towards its end.
type finalState struct {
	// deferred is a trigger that reached a task whose input has not ended
	// yet: its upstream tasks finished, so it is taken at the end of the
	// input (the in-flight data reaches the snapshot first).
	deferred *barrier.Barrier
	// waiting: the operators finished and the task waits for a final
	// checkpoint; first is the first checkpoint it took since.
	waiting bool
	first   barrier.CheckpointID
	done    bool
}

// triggerAtEnd handles a trigger of a task with inputs (a task whose
// upstream tasks all finished, triggered like a source).
func (t *Task) triggerAtEnd(b barrier.Barrier) error {
	if t.fin.waiting {
		return t.performFinalCheckpoint(b)
	}
	if t.fin.deferred == nil || t.fin.deferred.ID < b.ID {
		t.fin.deferred = &b
	}
	return nil
}

// performFinalCheckpoint takes a checkpoint while the task waits for its
// final one.
func (t *Task) performFinalCheckpoint(b barrier.Barrier) error {
	if t.fin.first == 0 {
		t.fin.first = b.ID
	}
	return t.performCheckpoint(b, 0)
}

// finalCompleted notes that checkpoint id completed.
func (t *Task) finalCompleted(id barrier.CheckpointID) {
	if t.fin.waiting && t.fin.first != 0 && id >= t.fin.first {
		t.fin.done = true
	}
}

// finalAborted notes that checkpoint id was aborted: a deferred trigger
// of it is dropped, and a task waiting for its final checkpoint asks
// again.
func (t *Task) finalAborted(id barrier.CheckpointID) {
	if d := t.fin.deferred; d != nil && d.ID <= id {
		t.fin.deferred = nil
	}
	if t.fin.waiting && !t.fin.done && t.fin.first != 0 && t.fin.first <= id {
		t.fin.first = 0
		t.ckpt.cfg.Responder.Finishing(t.cfg.Key)
	}
}

// needsFinalCheckpoint reports whether an operator wants a final
// checkpoint.
func (t *Task) needsFinalCheckpoint() bool {
	if t.ckpt == nil {
		return false
	}
	for _, op := range t.cfg.Operators {
		if f, ok := op.(FinalCheckpointOperator); ok && f.NeedsFinalCheckpoint() {
			return true
		}
	}
	return false
}

// awaitFinalCheckpoint sends end of data downstream (the outputs stay
// open: the final checkpoint's barrier follows), asks for a checkpoint and
// serves mails until one taken since has completed.
func (t *Task) awaitFinalCheckpoint(ctx context.Context) error {
	t.fin.waiting = true
	t.broadcastEvent(endOfDataPayload(), buffer.Event)
	t.flushOutputs()
	t.ckpt.cfg.Responder.Finishing(t.cfg.Key)
	for !t.fin.done {
		if err := t.runMails(); err != nil {
			return err
		}
		if t.fin.done {
			break
		}
		if err := t.wait(ctx, nil, false); err != nil {
			return err
		}
	}
	return nil
}

func endOfDataPayload() []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventEndOfData})
}

// restoredFinished reports whether the task restores as finished.
func (t *Task) restoredFinished() bool {
	r := t.cfg.Restore
	return r != nil && r.Finished[t.cfg.Key.Subtask]
}

// errDataForFinished fails a task restored as finished that receives data.
var errDataForFinished = errors.New("received data, but it had finished in the checkpoint it was restored from")

// runFinished is the run of a task restored as finished: it opens and
// runs nothing; it takes the end of partition of its inputs (their
// producers finished too) and sends its own.
func (t *Task) runFinished(ctx context.Context) error {
	if g := t.cfg.Gate; g != nil {
		if err := g.Start(); err != nil {
			return &Error{Task: t.cfg.Name, Err: err}
		}
		for ended := 0; ended < g.NumChannels(); {
			ch, b, err := g.PollNext()
			if err != nil {
				return t.wrapErr(err)
			}
			if b == nil {
				select {
				case <-g.Ready():
				case <-ctx.Done():
					return ctx.Err()
				}
				continue
			}
			if b.IsData() {
				b.Release()
				return &Error{Task: t.cfg.Name, Err: fmt.Errorf("channel %s: %w", g.Channel(ch).Name(), errDataForFinished)}
			}
			ev, err := decodeEvent(b.Bytes())
			b.Release()
			if err != nil {
				// A corrupt event on a channel of a finished task is bad
				// input like any other: it fails the task.
				return &Error{Task: t.cfg.Name, Err: fmt.Errorf("channel %s: %w", g.Channel(ch).Name(), err)}
			}
			if ev.kind == evEndOfPartition {
				g.Channel(ch).Release()
				ended++
			}
		}
	}
	if t.ckpt != nil {
		t.ckpt.cfg.Responder.Running(t.cfg.Key)
	}
	// As at the end of its input when it ran: every event-time window and
	// timer downstream may fire (its consumers' valves wait for this
	// channel's watermark).
	if len(t.cfg.Outputs) > 0 {
		t.out.watermark = eventtime.MaxWatermark
		t.broadcastEvent(watermarkPayload(eventtime.MaxWatermark), buffer.Event)
	}
	eop := endOfPartitionPayload()
	for _, p := range t.cfg.Outputs {
		p.Finish(eop)
	}
	return nil
}
