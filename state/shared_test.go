package state_test

import (
	"encoding/hex"
	"path"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// writeShared uploads a shared file of backend "b1" for checkpoint id.
func writeShared(t *testing.T, s *state.FileStorage, id barrier.CheckpointID, name, data string) state.NamedHandle {
	t.Helper()
	w, err := s.CreateSharedStateWriter(id, "b1", name)
	require.NoError(t, err)
	_, err = w.Write([]byte(data))
	require.NoError(t, err)
	h, err := w.Close()
	require.NoError(t, err)
	return state.NamedHandle{Name: name, StreamHandle: h}
}

func incrementalMeta(t *testing.T, s *state.FileStorage, id barrier.CheckpointID, shared ...state.NamedHandle) state.Metadata {
	t.Helper()
	w, err := s.CreateStateWriter(id, "op-MANIFEST")
	require.NoError(t, err)
	_, err = w.Write([]byte("manifest"))
	require.NoError(t, err)
	ph, err := w.Close()
	require.NoError(t, err)
	m := state.Metadata{ID: id, Kind: barrier.Checkpoint, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "v", Subtask: 0}: {Operators: map[string]state.OperatorSubtaskState{
			"op": {Keyed: &state.KeyedStateHandle{KeyGroups: keygroup.Range{Start: 0, End: 127},
				Incremental: &state.IncrementalHandle{Backend: "b1", Shared: shared,
					Private: []state.NamedHandle{{Name: "MANIFEST", StreamHandle: ph}}}}},
		}},
	}}
	require.NoError(t, s.WriteMetadata(m))
	return m
}

func exists(s *state.FileStorage, h state.NamedHandle) bool {
	return s.VerifyState(h.StreamHandle) == nil
}

// Discarding a checkpoint deletes the shared files only it refers to, and
// those uploaded for it that nothing refers to; never one a remaining
// checkpoint refers to.
func TestSharedFilesReferenceCounted(t *testing.T) {
	s := state.NewMemoryStorage()
	a := writeShared(t, s, 1, "a.sst", "aaaa")
	b := writeShared(t, s, 1, "b.sst", "bb")
	require.Equal(t, path.Join("shared", "b1", "1-a.sst"), a.Path)
	m1 := incrementalMeta(t, s, 1, a, b)
	c := writeShared(t, s, 2, "c.sst", "c")
	m2 := incrementalMeta(t, s, 2, a, c) // b compacted away, a reused
	d := writeShared(t, s, 3, "d.sst", "d")
	// Checkpoint 3 is aborted before its metadata.

	got, err := s.ReadMetadata(1)
	require.NoError(t, err)
	require.Equal(t, m1, got)
	require.Equal(t, int64(4+2+8), m1.Tasks[state.TaskKey{Vertex: "v"}].Size())

	require.NoError(t, s.Discard(1))
	require.True(t, exists(s, a), "a is still referenced by checkpoint 2")
	require.False(t, exists(s, b))
	require.NoError(t, s.Discard(3))
	require.False(t, exists(s, d), "uploaded for an aborted checkpoint")
	require.True(t, exists(s, c))
	latest, err := s.Latest()
	require.NoError(t, err)
	require.Equal(t, m2, latest)

	require.NoError(t, s.Discard(2))
	require.False(t, exists(s, a))
	require.False(t, exists(s, c))
}

// A checkpoint whose shared file is missing or corrupt is skipped for the
// previous one.
func TestMissingSharedFileSkipsCheckpoint(t *testing.T) {
	s := state.NewMemoryStorage()
	a := writeShared(t, s, 1, "a.sst", "aaaa")
	incrementalMeta(t, s, 1, a)
	b := writeShared(t, s, 2, "b.sst", "bbbb")
	incrementalMeta(t, s, 2, a, b)
	require.NoError(t, s.FS().(*state.MemFS).Corrupt(path.Join(s.Dir(), b.Path), func(p []byte) []byte { p[0] ^= 1; return p }))
	latest, err := s.Latest()
	require.NoError(t, err)
	require.Equal(t, barrier.CheckpointID(1), latest.ID)
	require.NoError(t, s.FS().Remove(path.Join(s.Dir(), a.Path)))
	_, err = s.Latest()
	require.ErrorIs(t, err, state.ErrNotFound)
}

// Metadata with incremental keyed state is version 3 and round-trips;
// without, it stays version 2 (see TestMetadataEncodingPinned).
func TestMetadataV3Incremental(t *testing.T) {
	s := state.NewMemoryStorage()
	m := incrementalMeta(t, s, 5, writeShared(t, s, 5, "x.sst", "x"))
	enc := state.EncodeMetadata(m)
	require.Equal(t, "574549524d4554410700", hex.EncodeToString(enc[:10]))
	got, err := state.DecodeMetadata(enc)
	require.NoError(t, err)
	require.Equal(t, m, got)
	ts := m.Tasks[state.TaskKey{Vertex: "v"}]
	enc = state.EncodeTaskSnapshot(ts)
	require.Equal(t, "57454952534e41500700", hex.EncodeToString(enc[:10]))
	gotTS, err := state.DecodeTaskSnapshot(enc)
	require.NoError(t, err)
	require.Equal(t, ts, gotTS)
	require.Equal(t, m, m.Clone())

	// The heap backend refuses an incremental handle with a clear error.
	err = state.ReadKeyedSnapshots([]state.KeyedStateHandle{*ts.Operators["op"].Keyed}, 128, keygroup.Range{Start: 0, End: 127}, s, nil,
		func(state.KeyedRecord) error { return nil })
	require.ErrorContains(t, err, "incremental snapshot of backend b1")
}
