package task

import (
	"fmt"
	"iter"

	"github.com/weirstream/weir/eventtime"
)

// This file is how a task splits its gate among the chain head's inputs:
// which input and record processor each channel belongs to, the valve of
// each input and their combination, and the end of each input.

// EndInputOperator is an Operator heading a chain that wants to know when
// one of its inputs ended (Flink's BoundedMultiInput): the task calls
// EndInput(i) once every channel of input i delivered end of partition,
// after all their records and before the task finishes. A task with
// several inputs runs on until all of them ended.
type EndInputOperator interface {
	Operator
	EndInput(input int) error
}

// inputChannel is what the task knows of one channel of its gate.
type inputChannel struct {
	input int                    // the head's input it feeds
	local eventtime.ChannelIndex // its index among that input's channels
	proc  RecordProcessor
	pf    Prefetcher       // proc, if it prefetches
	recs  iter.Seq[[]byte] // with pf: the channel's deserializer's Records
}

// initInputs maps the gate's channels to the inputs and builds the valve.
func (t *Task) initInputs() error {
	inputs := t.cfg.Inputs
	if len(inputs) == 0 {
		inputs = []Input{{Channels: t.cfg.Gate.NumChannels(), Processor: t.cfg.Input}}
	}
	n := 0
	for _, in := range inputs {
		n = max(n, in.Index+1)
	}
	per := make([]int, n)
	t.chans = make([]inputChannel, 0, t.cfg.Gate.NumChannels())
	for _, in := range inputs {
		switch {
		case in.Index < 0:
			return fmt.Errorf("input %d: negative index", in.Index)
		case in.Channels < 1:
			return fmt.Errorf("input %d: %d channels", in.Index, in.Channels)
		case in.Processor == nil:
			return fmt.Errorf("input %d: no record processor", in.Index)
		}
		pf, _ := in.Processor.(Prefetcher)
		for range in.Channels {
			t.chans = append(t.chans, inputChannel{input: in.Index, local: eventtime.ChannelIndex(per[in.Index]), proc: in.Processor, pf: pf})
			per[in.Index]++
		}
	}
	if len(t.chans) != t.cfg.Gate.NumChannels() {
		return fmt.Errorf("the inputs have %d channels, the gate %d", len(t.chans), t.cfg.Gate.NumChannels())
	}
	for i, c := range per {
		if c == 0 {
			return fmt.Errorf("input %d has no channel", i)
		}
	}
	v, err := eventtime.NewCombinedValve(per)
	if err != nil {
		return err
	}
	t.valve = v
	t.inputsLeft = per
	return nil
}

// channelEnded notes that channel ch delivered end of partition: the last
// channel of an input ends that input.
func (t *Task) channelEnded(ch int) error {
	in := t.chans[ch].input
	t.inputsLeft[in]--
	if t.inputsLeft[in] > 0 || len(t.cfg.Operators) == 0 {
		return nil
	}
	if op, ok := t.cfg.Operators[0].(EndInputOperator); ok {
		if err := op.EndInput(in); err != nil {
			return t.operatorErr(op, fmt.Errorf("end of input %d: %w", in, err))
		}
	}
	return nil
}

// NumInputs is the number of inputs of the task's chain head (0 for a
// source task).
func (t *Task) NumInputs() int {
	if t.valve == nil {
		return 0
	}
	return t.valve.Inputs()
}

// InputWatermarkOf returns input i's watermark: what its channels' valve
// emitted (eventtime.MinWatermark before any). Only from the task's
// goroutine, or after Run returned.
func (t *Task) InputWatermarkOf(i int) int64 { return t.valve.InputWatermark(i) }

// inputEdges returns the number of channels of each entry of the task's
// inputs, in the gate's order (nil for a source task).
func (t *Task) inputEdges() []int {
	if t.cfg.Gate == nil {
		return nil
	}
	if len(t.cfg.Inputs) == 0 {
		return []int{t.cfg.Gate.NumChannels()}
	}
	n := make([]int, len(t.cfg.Inputs))
	for i, in := range t.cfg.Inputs {
		n[i] = in.Channels
	}
	return n
}
