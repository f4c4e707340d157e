package task

import (
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/network/wire"
)

type eventKind uint8

const (
	evEndOfPartition eventKind = iota
	evBarrier
	evCancel
	evEndOfData
	evWatermark
)

type event struct {
	kind     eventKind
	barrier  barrier.Barrier
	cancelID barrier.CheckpointID
}

func decodeEvent(p []byte) (event, error) {
	e, err := wire.DecodeEvent(p)
	if err != nil {
		return event{}, err
	}
	switch e.Kind {
	case wire.EventBarrier:
		return event{kind: evBarrier, barrier: e.Barrier}, nil
	case wire.EventCancelCheckpoint:
		return event{kind: evCancel, cancelID: e.CancelID}, nil
	case wire.EventEndOfPartition:
		return event{kind: evEndOfPartition}, nil
	case wire.EventEndOfData:
		return event{kind: evEndOfData}, nil
	default:
		return event{kind: evWatermark}, nil
	}
}

func endOfPartitionPayload() []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventEndOfPartition})
}

func barrierPayload(b barrier.Barrier) []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventBarrier, Barrier: b})
}

func cancelPayload(id barrier.CheckpointID) []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventCancelCheckpoint, CancelID: id})
}
