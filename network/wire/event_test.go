package wire

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/weirstream/weir/barrier"
)

func sampleEvents() []Event {
	bar := func(id barrier.CheckpointID, o barrier.Options) Event {
		return Event{Kind: EventBarrier, Barrier: barrier.Barrier{ID: id, Timestamp: 1_700_000_000_123, Options: o}}
	}
	aligned := bar(1, barrier.Options{})
	return []Event{
		aligned,
		bar(2, barrier.Options{Kind: barrier.Savepoint, Alignment: barrier.Unaligned}),
		bar(1<<64-1, barrier.Options{Alignment: barrier.AlignedWithTimeout, AlignmentTimeout: 30 * time.Second}),
		{Kind: EventCancelCheckpoint, CancelID: 42},
		{Kind: EventEndOfPartition},
		{Kind: EventEndOfData},
		{Kind: EventWatermark, Watermark: -5},
		{Kind: EventWatermarkStatus, Status: StatusIdle},
		{Kind: EventWatermarkStatus, Status: StatusActive},
		{Kind: EventAnnouncement, AnnouncedSeq: 17, Announced: &aligned},
		{Kind: EventAnnouncement, AnnouncedSeq: 1<<32 - 1, Announced: &Event{Kind: EventWatermark, Watermark: 9}},
	}
}

func TestEventRoundTrip(t *testing.T) {
	for _, e := range sampleEvents() {
		t.Run(e.Kind.String(), func(t *testing.T) {
			p := AppendEvent(nil, e)
			got, err := DecodeEvent(p)
			require.NoError(t, err)
			require.Equal(t, e, got)
			require.Equal(t, p, AppendEvent(nil, got))
		})
	}
}

func TestEventBytes(t *testing.T) {
	p := AppendEvent(nil, Event{Kind: EventBarrier, Barrier: barrier.Barrier{ID: 3, Timestamp: 4,
		Options: barrier.Options{Kind: barrier.Savepoint, Alignment: barrier.AlignedWithTimeout, AlignmentTimeout: 1500 * time.Millisecond}}})
	want := []byte{1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 1, 2, 0, 0, 0, 0, 0, 0, 0x05, 0xdc}
	require.Equal(t, want, p)
	require.Equal(t, []byte{6, 0, 0, 0, 9, 3}, AppendEvent(nil, Event{Kind: EventAnnouncement, AnnouncedSeq: 9, Announced: &Event{Kind: EventEndOfPartition}}))
	require.Equal(t, []byte{7, 1}, AppendEvent(nil, Event{Kind: EventWatermarkStatus, Status: StatusIdle}))
}

func TestEventFaults(t *testing.T) {
	good := AppendEvent(nil, sampleEvents()[0])
	withByte := func(p []byte, i int, v byte) []byte {
		q := append([]byte(nil), p...)
		q[i] = v
		return q
	}
	bigTimeout := append([]byte(nil), good...)
	binary.BigEndian.PutUint64(bigTimeout[19:], 1<<62)
	cases := []struct {
		name string
		p    []byte
		want string
	}{
		{"empty", nil, "empty payload"},
		{"unknown-kind-0", []byte{0}, "unknown kind 0"},
		{"unknown-kind-8", []byte{8}, "unknown kind 8"},
		{"status-short", []byte{7}, "want 2"},
		{"status-long", []byte{7, 0, 0}, "want 2"},
		{"status-unknown", []byte{7, 2}, "watermark status 2"},
		{"barrier-short", good[:len(good)-1], "payload of 26 bytes, want 27"},
		{"barrier-long", append(append([]byte(nil), good...), 0), "payload of 28 bytes, want 27"},
		{"barrier-id-0", withByte(good, 8, 0), "checkpoint id 0"},
		{"barrier-type", withByte(good, 17, 2), "barrier type 2"},
		{"barrier-alignment", withByte(good, 18, 3), "barrier alignment 3"},
		{"barrier-timeout-range", bigTimeout, "out of range"},
		{"cancel-short", []byte{2, 0, 0, 0, 0, 0, 0, 1}, "want 9"},
		{"cancel-id-0", []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}, "checkpoint id 0"},
		{"eop-long", []byte{3, 0}, "want 1"},
		{"eod-long", []byte{4, 4}, "want 1"},
		{"watermark-short", []byte{5, 1}, "want 9"},
		{"announcement-short", []byte{6, 0, 0, 0, 1}, "at least 6"},
		{"announcement-of-announcement", []byte{6, 0, 0, 0, 1, 6, 0, 0, 0, 2, 3}, "announcement of an announcement"},
		{"announcement-inner-unknown", []byte{6, 0, 0, 0, 1, 9}, "unknown kind 9"},
		{"announcement-long", []byte{6, 0, 0, 0, 1, 3, 3}, "announcement payload of 7 bytes, want 6"},
		{"announcement-inner-short", []byte{6, 0, 0, 0, 1, 5, 0}, "watermark payload of 2 bytes, want 9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeEvent(c.p)
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

func TestAppendEventPanics(t *testing.T) {
	for _, e := range []Event{
		{Kind: 0},
		{Kind: EventAnnouncement},
		{Kind: EventAnnouncement, Announced: &Event{Kind: EventAnnouncement, Announced: &Event{Kind: EventEndOfData}}},
		{Kind: EventBarrier, Barrier: barrier.Barrier{ID: 1, Options: barrier.Options{Alignment: 3}}},
		{Kind: EventBarrier, Barrier: barrier.Barrier{ID: 1, Options: barrier.Options{AlignmentTimeout: -1}}},
	} {
		require.Panics(t, func() { AppendEvent(nil, e) }, "%+v", e)
	}
}

func TestDataTypeForEvent(t *testing.T) {
	ev := sampleEvents()
	require.Equal(t, DataAlignedBarrier, DataTypeForEvent(ev[0]))
	require.Equal(t, DataPrioritizedEvent, DataTypeForEvent(ev[1]))
	require.Equal(t, DataTimeoutableAlignedBarrier, DataTypeForEvent(ev[2]))
	for _, e := range ev[3:9] {
		require.Equal(t, DataEvent, DataTypeForEvent(e), e.Kind.String())
	}
	require.Equal(t, DataPrioritizedEvent, DataTypeForEvent(ev[9]))
	require.True(t, DataTypeForEvent(ev[0]).BlocksUpstream())
	require.True(t, DataTypeForEvent(ev[2]).BlocksUpstream())
	require.False(t, DataTypeForEvent(ev[1]).BlocksUpstream())
}
