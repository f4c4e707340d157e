package state_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
)

func sampleChannelState() state.ChannelState {
	return state.ChannelState{
		Inputs: [][]state.InFlight{
			{{Bytes: []byte{0, 0, 0, 4, 'p'}}, {Event: true, Bytes: []byte{5, 0, 0, 0, 0, 0, 0, 0, 9}}, {Bytes: []byte("ing")}},
			nil,
		},
		Outputs: [][][]state.InFlight{
			{{{Bytes: []byte{1, 2, 3}}}, nil, {{Event: true, Bytes: []byte{7, 1}}}},
			{},
		},
	}
}

func TestChannelStateRoundTrip(t *testing.T) {
	cs := sampleChannelState()
	require.False(t, cs.Empty())
	require.True(t, state.ChannelState{Inputs: make([][]state.InFlight, 3)}.Empty())
	enc := state.AppendChannelState(nil, cs)
	got, err := state.DecodeChannelState(enc)
	require.NoError(t, err)
	require.Equal(t, cs, got)

	// Every truncation and trailing garbage is detected.
	for i := range enc {
		_, err := state.DecodeChannelState(enc[:i])
		require.ErrorIs(t, err, state.ErrCorruptChannelState, "truncated to %d", i)
	}
	_, err = state.DecodeChannelState(append(enc, 0))
	require.ErrorIs(t, err, state.ErrCorruptChannelState)

	// A file of version 1, whose keyed records carried no key group, is
	// refused, not misread.
	old := append([]byte(nil), enc...)
	old[8], old[9] = 1, 0
	_, err = state.DecodeChannelState(old)
	require.ErrorIs(t, err, state.ErrCorruptChannelState)
	require.ErrorContains(t, err, "unsupported channel state version 1")
}

// A checkpoint whose channel state file is damaged is skipped for the
// previous one, like one whose operator state is; reading the damaged file
// directly is a *CorruptError.
func TestCorruptChannelStateFallsBack(t *testing.T) {
	s := state.NewMemoryStorage()
	for id := barrier.CheckpointID(1); id <= 2; id++ {
		h, err := state.WriteChannelState(s, id, "sum-0-channels", sampleChannelState())
		require.NoError(t, err)
		require.Equal(t, 2, h.InputChannels)
		require.Equal(t, []int{3, 0}, h.Subpartitions)
		require.NoError(t, s.WriteMetadata(state.Metadata{ID: id, Tasks: map[state.TaskKey]state.TaskSnapshot{
			{Vertex: "sum"}: {Operators: map[string]state.OperatorSubtaskState{}, Channels: h}}}))
		cs, err := state.ReadChannelState(s, *h)
		require.NoError(t, err)
		require.Equal(t, sampleChannelState(), cs)
	}
	m, err := s.Latest()
	require.NoError(t, err)
	require.EqualValues(t, 2, m.ID)

	h := *m.Tasks[state.TaskKey{Vertex: "sum"}].Channels
	require.NoError(t, s.FS().(*state.MemFS).Corrupt("/checkpoints/chk-2/sum-0-channels", func(b []byte) []byte {
		b[len(b)/2] ^= 0x40
		return b
	}))
	_, err = state.ReadChannelState(s, h)
	var ce *state.CorruptError
	require.ErrorAs(t, err, &ce)
	m, err = s.Latest()
	require.NoError(t, err)
	require.EqualValues(t, 1, m.ID, "the corrupt checkpoint is skipped")

	// A handle that does not match the file is refused too.
	h1 := *m.Tasks[state.TaskKey{Vertex: "sum"}].Channels
	h1.InputChannels = 3
	_, err = state.ReadChannelState(s, h1)
	require.ErrorAs(t, err, &ce)
}
