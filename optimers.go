package weir

import (
	"slices"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// operatorTimers are the processing-time timers of a non-keyed process
// function's subtask (a CoProcessFunction's): a set of timestamps, one
// timer per timestamp, kept as operator state so that checkpoints carry
// them. Restored at another parallelism, the timers of all old subtasks
// are split among the new ones; timers that came due while the job was
// down fire on restore.
type operatorTimers struct {
	ctx *task.OperatorContext
	at  []int64 // ascending, distinct
	st  *state.OperatorListState[int64]
}

// operatorTimersState names the operator state of operatorTimers.
const operatorTimersState = "_timers/processing"

func newOperatorTimers(ctx *task.OperatorContext) (*operatorTimers, error) {
	st, err := state.GetOperatorListState(ctx.OperatorState, state.ListDescriptor[int64]{Name: operatorTimersState, Codec: codec.Int64()}, state.SplitDistribute)
	if err != nil {
		return nil, err
	}
	restored, err := st.Get()
	if err != nil {
		return nil, err
	}
	t := &operatorTimers{ctx: ctx, st: st}
	for _, ts := range restored {
		t.add(ts)
	}
	if len(t.at) > 0 {
		ctx.RequestProcessingTime(t.at[0])
	}
	return t, nil
}

func (t *operatorTimers) add(ts int64) {
	if i, found := slices.BinarySearch(t.at, ts); !found {
		t.at = slices.Insert(t.at, i, ts)
	}
}

func (t *operatorTimers) remove(ts int64) {
	if i, found := slices.BinarySearch(t.at, ts); found {
		t.at = slices.Delete(t.at, i, i+1)
	}
}

// snapshot writes the timers into the operator state, which the task
// snapshots next.
func (t *operatorTimers) snapshot() error { return t.st.Update(t.at) }

// advance fires, in order, every timer at or before now (also those the
// firing ones register), then asks for a callback at the next one.
func (t *operatorTimers) advance(now int64, fire func(ts int64) error) error {
	for len(t.at) > 0 && t.at[0] <= now {
		ts := t.at[0]
		t.at = t.at[1:]
		if err := fire(ts); err != nil {
			return err
		}
	}
	if len(t.at) > 0 {
		t.ctx.RequestProcessingTime(t.at[0])
	}
	return nil
}
