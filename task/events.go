package task

import (
	"fmt"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/network/wire"
)

type eventKind uint8

const (
	evEndOfPartition eventKind = iota
	evBarrier
	evCancel
	evEndOfData
	evWatermark
	evWatermarkStatus
	evAnnouncement
)

type event struct {
	kind      eventKind
	barrier   barrier.Barrier
	cancelID  barrier.CheckpointID
	watermark int64
	status    eventtime.Status
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
	case wire.EventWatermark:
		return event{kind: evWatermark, watermark: e.Watermark}, nil
	case wire.EventWatermarkStatus:
		st := eventtime.Active
		if e.Status == wire.StatusIdle {
			st = eventtime.Idle
		}
		return event{kind: evWatermarkStatus, status: st}, nil
	case wire.EventAnnouncement:
		if e.Announced.Kind == wire.EventBarrier {
			return event{kind: evAnnouncement, barrier: e.Announced.Barrier}, nil
		}
	}
	return event{}, fmt.Errorf("unexpected %s event", e.Kind)
}

func watermarkPayload(wm int64) []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventWatermark, Watermark: wm})
}

func statusPayload(s eventtime.Status) []byte {
	st := wire.StatusActive
	if s == eventtime.Idle {
		st = wire.StatusIdle
	}
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventWatermarkStatus, Status: st})
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
