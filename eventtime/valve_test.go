package eventtime

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewValveRejectsBadChannelCounts(t *testing.T) {
	tooMany := math.MaxInt32
	tooMany++ // on 32-bit platforms it wraps to a negative count
	for _, n := range []int{0, -1, tooMany} {
		v, err := NewValve(n)
		require.Nil(t, v)
		require.ErrorIs(t, err, ErrInvalidArgument, "channels=%d", n)
	}
	v, err := NewValve(3)
	require.NoError(t, err)
	require.Equal(t, 3, v.Channels())
	require.Equal(t, MinWatermark, v.Watermark())
	require.Equal(t, Active, v.Status())
	for ch := range 3 {
		require.Equal(t, ChannelState{Watermark: MinWatermark, Status: Active, Aligned: true},
			v.Channel(ChannelIndex(ch)))
	}
}

func TestValvePanicsOnBadChannel(t *testing.T) {
	v, err := NewValve(2)
	require.NoError(t, err)
	const want = "eventtime: valve channel 2 outside 0..1"
	require.PanicsWithValue(t, want, func() { v.InputWatermark(2, 1) })
	require.PanicsWithValue(t, want, func() { v.InputStatus(2, Idle) })
	require.PanicsWithValue(t, want, func() { v.Channel(2) })
	require.PanicsWithValue(t, "eventtime: valve channel -1 outside 0..1",
		func() { v.InputWatermark(-1, 1) })
	require.PanicsWithValue(t, "eventtime: valve channel 0 reported invalid status 7",
		func() { v.InputStatus(0, Status(7)) })
}

func TestValveEmissions(t *testing.T) {
	v, err := NewValve(2)
	require.NoError(t, err)
	_, ok := v.InputWatermark(0, 30)
	require.False(t, ok)
	wm, ok := v.InputWatermark(1, 10)
	require.True(t, ok)
	require.Equal(t, int64(10), wm)

	require.Equal(t, Emission{Status: Active}, v.InputStatus(0, Idle))
	require.Equal(t, ChannelState{Watermark: 30, Status: Idle}, v.Channel(0))
	require.Equal(t, Emission{Watermark: 30, HasWatermark: true, StatusChanged: true, Status: Idle},
		v.InputStatus(1, Idle))
	require.Equal(t, Idle, v.Status())
	require.Equal(t, int64(30), v.Watermark())

	require.Equal(t, Emission{Status: Idle}, v.InputStatus(1, Idle))
	require.Equal(t, Emission{StatusChanged: true, Status: Active}, v.InputStatus(1, Active))
	require.Equal(t, ChannelState{Watermark: 10, Status: Active}, v.Channel(1), "behind: not aligned")
	require.Equal(t, Emission{Status: Active}, v.InputStatus(0, Active))
	require.Equal(t, ChannelState{Watermark: 30, Status: Active, Aligned: true}, v.Channel(0))
}

func TestValveDoesNotAllocate(t *testing.T) {
	v, err := NewValve(8)
	require.NoError(t, err)
	ts := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		for ch := range ChannelIndex(8) {
			ts++
			v.InputWatermark(ch, ts)
		}
		v.InputStatus(3, Idle)
		v.InputStatus(3, Active)
		for ch := range ChannelIndex(8) {
			v.InputStatus(ch, Idle)
		}
		for ch := range ChannelIndex(8) {
			v.InputStatus(ch, Active)
		}
	})
	require.Zero(t, allocs)
}

func TestStatusString(t *testing.T) {
	require.Equal(t, "active", Active.String())
	require.Equal(t, "idle", Idle.String())
	require.Equal(t, "Status(9)", Status(9).String())
}
