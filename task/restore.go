package task

import (
	"errors"
	"fmt"
	"slices"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/state"
)

// ErrRescaleChannelState is wrapped by the error of a task told to restore
// an unaligned checkpoint's channel state at another parallelism or over
// another topology.
var ErrRescaleChannelState = errors.New("task: the in-flight data of an unaligned checkpoint restores only at the parallelism it was taken at; " +
	"restore from an aligned savepoint instead (savepoints are always aligned: Job.TriggerSavepoint or StopWithSavepoint)")

// restoreChannelState puts the channel state of the checkpoint the task
// restores from back in flight: first what its outputs held (ahead of
// anything the task produces), then what its inputs held, each channel's
// items handed to the operators before anything new arrives on that
// channel (a record cut at the end continues in the channel's next
// buffer).
func (t *Task) restoreChannelState() error {
	r := t.cfg.Restore
	if r == nil || len(r.Channels) == 0 {
		return nil
	}
	if r.PrevParallelism != t.cfg.Parallelism {
		return &Error{Task: t.cfg.Name, Err: fmt.Errorf("%w (checkpoint %d: parallelism %d, now %d)",
			ErrRescaleChannelState, r.ID, r.PrevParallelism, t.cfg.Parallelism)}
	}
	h := r.Channels[t.cfg.Key.Subtask]
	if h == nil {
		return nil
	}
	inputs := 0
	if t.cfg.Gate != nil {
		inputs = t.cfg.Gate.NumChannels()
	}
	same := h.InputChannels == inputs && len(h.Subpartitions) == len(t.cfg.Outputs)
	for i := 0; same && i < len(t.cfg.Outputs); i++ {
		same = h.Subpartitions[i] == t.cfg.Outputs[i].NumSubpartitions()
	}
	if !same {
		return &Error{Task: t.cfg.Name, Err: fmt.Errorf("%w (checkpoint %d: %d input channels and subpartitions %v, now %d and %v)",
			ErrRescaleChannelState, r.ID, h.InputChannels, h.Subpartitions, inputs, t.subpartitions())}
	}
	// The same number of channels split otherwise among the inputs (an
	// upstream operator's parallelism changed, inputs swapped) would
	// hand one input's data to another. A handle of an older checkpoint
	// does not say: its total is all there is to check.
	if edges := t.inputEdges(); h.Inputs != nil && !slices.Equal(h.Inputs, edges) {
		return &Error{Task: t.cfg.Name, Err: fmt.Errorf("%w (checkpoint %d: input channels %v by input, now %v)",
			ErrRescaleChannelState, r.ID, h.Inputs, edges)}
	}
	cs, err := state.ReadChannelState(r.Reader, *h)
	if err != nil {
		return &Error{Task: t.cfg.Name, Err: fmt.Errorf("restore channel state of checkpoint %d: %w", r.ID, err)}
	}
	for i, p := range t.cfg.Outputs {
		for sub, items := range cs.Outputs[i] {
			for _, it := range items {
				if err := p.RestoreInFlight(sub, it.Event, it.Bytes); err != nil {
					return &Error{Task: t.cfg.Name, Err: fmt.Errorf("restore channel state of checkpoint %d: %w", r.ID, err)}
				}
			}
		}
	}
	for ch, items := range cs.Inputs {
		for _, it := range items {
			b := buffer.Wrap(it.Bytes, buffer.Data)
			if it.Event {
				b.SetType(buffer.Event)
				err = t.handleEvent(ch, b)
				b.Release()
			} else {
				err = t.processRestored(ch, b)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Task) subpartitions() []int {
	n := make([]int, len(t.cfg.Outputs))
	for i, p := range t.cfg.Outputs {
		n[i] = p.NumSubpartitions()
	}
	return n
}

// processRestored hands the records in data buffer b of channel ch to the
// operators (runInput's loop, for restored in-flight data).
func (t *Task) processRestored(ch int, b *buffer.Buffer) error {
	d := t.deser[ch]
	d.SetBuffer(b)
	for {
		rec, ok, err := d.Next()
		if err != nil {
			return t.wrapErr(err)
		}
		if !ok {
			return nil
		}
		t.metrics.RecordsIn++
		if err := t.chans[ch].proc.ProcessRecord(rec); err != nil {
			return t.wrapErr(err)
		}
	}
}
