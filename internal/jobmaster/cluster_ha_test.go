package jobmaster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/state"
)

// A pointer whose checkpoint lost its metadata: the error names the
// checkpoint, the etcd key and the storage. A job without two-phase-commit
// sinks falls back to the checkpoint before and logs which it skipped and
// why; a job with them does not (they may have committed the newer one).
func TestOpenPointerFallsBackOnlyWithoutTwoPhaseSinks(t *testing.T) {
	dir := t.TempDir()
	fs, err := state.NewFileStorage(state.FileStorageConfig{Dir: dir})
	require.NoError(t, err)
	for _, id := range []barrier.CheckpointID{4, 5} {
		require.NoError(t, fs.WriteMetadata(state.Metadata{ID: id, Timestamp: 1, Kind: barrier.Checkpoint,
			Tasks: map[state.TaskKey]state.TaskSnapshot{{Vertex: "src"}: {}}}))
	}
	require.NoError(t, os.Remove(filepath.Join(dir, "chk-5", state.MetadataFile)))
	p := &ha.Pointer{ID: 5, Epoch: 9, Prev: 4}
	const key = "/weir/jobs/j/checkpoint"

	core, logs := observer.New(zap.WarnLevel)
	j := &clusterJob{spec: &Spec{}, ck: &checkpointing{storage: fs}, storage: state.Location{Root: dir}, log: zap.New(core)}
	m, err := j.openPointer(p, key)
	require.NoError(t, err)
	require.Equal(t, barrier.CheckpointID(4), m.ID)
	require.Equal(t, 1, logs.Len())
	e := logs.All()[0]
	require.Contains(t, e.Message, "skipping the latest checkpoint")
	require.Equal(t, uint64(5), e.ContextMap()["skipped"])
	require.Equal(t, uint64(4), e.ContextMap()["restoring"])

	j.spec.Final = &FinalCommits{}
	_, err = j.openPointer(p, key)
	require.ErrorIs(t, err, state.ErrNotFound)
	require.ErrorContains(t, err, "checkpoint 5, which etcd's "+key+" points to, in "+dir)
	require.ErrorContains(t, err, "not falling back")

	// Neither the pointer's checkpoint nor the one before verifies.
	j.spec.Final = nil
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chk-4", state.MetadataFile), []byte("garbage"), 0o600))
	_, err = j.openPointer(p, key)
	require.ErrorContains(t, err, "the checkpoint before it, 4, does not verify either")
	var ce *state.CorruptError
	require.ErrorAs(t, err, &ce)
}

// A new leader keeps the newest Retained checkpoints an earlier leader
// left (the restored one among them), drops a checkpoint whose discard
// the earlier leader began (no metadata) and those beyond retention, and
// holds the pointer's predecessor, the fallback, when retention would
// not keep it.
func TestEarlierCheckpointsKeepsRetained(t *testing.T) {
	for _, tc := range []struct {
		retained int
		keep     []barrier.CheckpointID
		drop     []barrier.CheckpointID
		held     []barrier.CheckpointID
	}{
		{retained: 0, drop: []barrier.CheckpointID{3, 2, 1}, held: []barrier.CheckpointID{4}},
		{retained: 1, drop: []barrier.CheckpointID{3, 2, 1}, held: []barrier.CheckpointID{4}},
		{retained: 2, keep: []barrier.CheckpointID{4}, drop: []barrier.CheckpointID{3, 2, 1}},
		{retained: 3, keep: []barrier.CheckpointID{3, 4}, drop: []barrier.CheckpointID{2, 1}},
		// chk-2 has no metadata: it is not counted, the one before is kept.
		{retained: 4, keep: []barrier.CheckpointID{1, 3, 4}, drop: []barrier.CheckpointID{2}},
	} {
		dir := t.TempDir()
		fs, err := state.NewFileStorage(state.FileStorageConfig{Dir: dir})
		require.NoError(t, err)
		for id := barrier.CheckpointID(1); id <= 5; id++ {
			require.NoError(t, fs.WriteMetadata(state.Metadata{ID: id, Timestamp: 1, Kind: barrier.Checkpoint,
				Tasks: map[state.TaskKey]state.TaskSnapshot{{Vertex: "src"}: {}}}))
		}
		require.NoError(t, os.Remove(filepath.Join(dir, "chk-2", state.MetadataFile)))
		spec := &Spec{Checkpoint: &CheckpointSpec{}}
		spec.Checkpoint.Coordinator.Retained = tc.retained
		j := &clusterJob{spec: spec, ck: &checkpointing{storage: fs}, guard: &leaderGuard{}, log: zap.NewNop()}
		keep, drop := j.earlierCheckpoints(5, 4)
		var kept []barrier.CheckpointID
		for _, m := range keep {
			kept = append(kept, m.ID)
		}
		require.Equal(t, tc.keep, kept, "retained %d", tc.retained)
		require.Equal(t, tc.drop, drop, "retained %d", tc.retained)
		require.Equal(t, tc.held, j.guard.mu.held, "retained %d", tc.retained)
	}
}
