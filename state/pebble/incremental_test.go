package pebble_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/internal/storagetest"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/internal/backendtest"
	"github.com/weirstream/weir/state/pebble"
)

// incFactory makes incremental backends with a tiny cache, so that the
// incremental suites exercise eviction between checkpoints too.
func incFactory(t testing.TB, maxPar, par, index int) state.KeyedBackend {
	b, err := pebble.New(small(t, pebble.Config{MaxParallelism: maxPar, Parallelism: par, Index: index, Incremental: true, CacheBytes: tinyCache}))
	require.NoError(t, err)
	return b
}

// The conformance suite and the model test with incremental checkpoints:
// every snapshot the suite takes into its storage is incremental.
func TestIncrementalConformance(t *testing.T) { backendtest.Run(t, incFactory) }

func TestIncrementalModel(t *testing.T) { backendtest.Model(t, incFactory) }

// complete writes the metadata of checkpoint id holding h, as the
// coordinator would, and tells the backend.
func complete(t *testing.T, st state.Storage, b *pebble.Backend, id barrier.CheckpointID, h state.KeyedStateHandle) {
	t.Helper()
	require.NoError(t, st.WriteMetadata(state.Metadata{ID: id, Kind: barrier.Checkpoint, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "v"}: {Operators: map[string]state.OperatorSubtaskState{"op": {Keyed: &h}}},
	}}))
	b.NotifyCheckpointComplete(id)
}

// uploadedFor is the bytes of the files checkpoint id wrote: its private
// files and the shared files uploaded for it.
func uploadedFor(h state.KeyedStateHandle, id barrier.CheckpointID) int64 {
	var n int64
	for _, f := range h.Incremental.Private {
		n += f.Size
	}
	for _, f := range h.Incremental.Shared {
		if strings.HasPrefix(path.Base(f.Path), fmt.Sprintf("%d-", id)) {
			n += f.Size
		}
	}
	return n
}

func putAll(t testing.TB, b state.KeyedBackend, s state.StateID, keys []int, round int) {
	val := make([]byte, 100)
	for _, i := range keys {
		k := backendtest.Key(i)
		b.SetCurrentKey(k, backendtest.Group(k, b.MaxParallelism()))
		copy(val, fmt.Sprintf("key %d round %d", i, round))
		require.NoError(t, b.Put(s, nil, val))
	}
}

// On each storage: after 1 % of the keys change, the next checkpoint
// uploads a small fraction of the first; with retention, discarding older checkpoints
// leaves every retained one restorable.
func TestIncrementalCheckpoints(t *testing.T) {
	const n, retained = 10000, 2
	storagetest.Run(t, func(t *testing.T, sto *storagetest.Storage) {
		st := sto.Open(sto.Root(), "job")
		b, err := pebble.New(small(t, pebble.Config{Incremental: true}))
		require.NoError(t, err)
		defer b.Close()
		s, err := b.Register("v", state.KindValue)
		require.NoError(t, err)
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		putAll(t, b, s, all, 0)
		require.NoError(t, b.Compact(context.Background()))

		dumps := map[barrier.CheckpointID]map[string]string{}
		handles := map[barrier.CheckpointID]state.KeyedStateHandle{}
		var sizes []int64
		for id := barrier.CheckpointID(1); id <= 8; id++ {
			if id > 1 {
				changed := make([]int, 0, n/100)
				for i := range n / 100 {
					changed = append(changed, (int(id)*7919+i*101)%n)
				}
				putAll(t, b, s, changed, int(id))
			}
			dumps[id] = backendtest.Dump(t, b)
			h := backendtest.Snap(t, b, id, st, "v-0-op")
			require.NotNil(t, h.Incremental)
			handles[id] = h
			sizes = append(sizes, uploadedFor(h, id))
			complete(t, st, b, id, h)
			if id > retained {
				require.NoError(t, st.Discard(id-retained))
			}
		}
		t.Logf("bytes uploaded per checkpoint: %v", sizes)
		// Until L0 fills up (four sublevels), a checkpoint uploads the flushed
		// change; the compaction that follows rewrites files, uploaded again.
		for _, sz := range sizes[1:4] {
			require.Less(t, sz, sizes[0]/10, "after 1%% changed, a checkpoint uploads less than 10%% of the first (%v)", sizes)
		}
		// Every retained checkpoint restores, after the older ones were
		// discarded, at the same parallelism and rescaled.
		for id := barrier.CheckpointID(8 - retained + 1); id <= 8; id++ {
			r := incFactory(t, keygroup.DefaultMaxParallelism, 1, 0)
			require.NoError(t, r.Restore([]state.KeyedStateHandle{handles[id]}, st))
			require.Equal(t, dumps[id], backendtest.Dump(t, r), "checkpoint %d", id)
			require.NoError(t, r.Close())
			union := map[string]string{}
			for i := range 2 {
				r := incFactory(t, keygroup.DefaultMaxParallelism, 2, i)
				require.NoError(t, r.Restore([]state.KeyedStateHandle{handles[id]}, st))
				for k, v := range backendtest.Dump(t, r) {
					union[k] = v
				}
				require.NoError(t, r.Close())
			}
			require.Equal(t, dumps[id], union, "checkpoint %d at parallelism 2", id)
		}
		// The discarded ones are gone, with the shared files only they used.
		_, err = st.ReadMetadata(1)
		require.ErrorIs(t, err, state.ErrNotFound)
		for _, f := range handles[1].Incremental.Shared {
			if !sharedBy(handles[7], f) && !sharedBy(handles[8], f) {
				_, err := st.OpenState(f.StreamHandle)
				require.Error(t, err, "%s", f.Path)
			}
		}
	})
}

func sharedBy(h state.KeyedStateHandle, f state.NamedHandle) bool {
	for _, g := range h.Incremental.Shared {
		if g.Path == f.Path {
			return true
		}
	}
	return false
}

// On each storage: a missing shared file fails the restore with the
// file's name; storage's
// Latest skips such a checkpoint for the previous one.
func TestIncrementalMissingSharedFile(t *testing.T) {
	storagetest.Run(t, func(t *testing.T, sto *storagetest.Storage) {
		root := sto.Root()
		st := sto.Open(root, "job")
		b, err := pebble.New(small(t, pebble.Config{Incremental: true}))
		require.NoError(t, err)
		defer b.Close()
		s, err := b.Register("v", state.KindValue)
		require.NoError(t, err)
		putAll(t, b, s, []int{1, 2, 3}, 0)
		h1 := backendtest.Snap(t, b, 1, st, "op")
		complete(t, st, b, 1, h1)
		putAll(t, b, s, []int{4}, 0)
		h2 := backendtest.Snap(t, b, 2, st, "op")
		complete(t, st, b, 2, h2)
		var own state.NamedHandle
		for _, f := range h2.Incremental.Shared {
			if strings.HasPrefix(path.Base(f.Path), "2-") {
				own = f
			}
		}
		require.NotEmpty(t, own.Path)
		sto.Remove(sto.Join(root, "job", own.Path))

		r := incFactory(t, keygroup.DefaultMaxParallelism, 1, 0)
		defer r.Close()
		err = r.Restore([]state.KeyedStateHandle{h2}, st)
		var ce *state.CorruptError
		require.ErrorAs(t, err, &ce)
		require.ErrorContains(t, err, own.Name)
		if !sto.S3() {
			require.ErrorIs(t, err, fs.ErrNotExist)
		}
		latest, err := st.Latest()
		require.NoError(t, err)
		require.Equal(t, barrier.CheckpointID(1), latest.ID)
	})
}

// failingShared fails every shared upload.
type failingShared struct{ *state.FileStorage }

var errUpload = errors.New("upload refused")

func (failingShared) CreateSharedStateWriter(barrier.CheckpointID, string, string) (state.StateWriter, error) {
	return nil, errUpload
}

// A failed upload fails the checkpoint; savepoints are always full.
func TestIncrementalUploadFailureAndSavepoints(t *testing.T) {
	st := state.NewMemoryStorage()
	b, err := pebble.New(small(t, pebble.Config{Incremental: true}))
	require.NoError(t, err)
	defer b.Close()
	s, err := b.Register("v", state.KindValue)
	require.NoError(t, err)
	putAll(t, b, s, []int{1, 2, 3}, 0)
	f, err := b.Snapshot(1, state.PrefixedWriters(failingShared{st}, "op"))
	require.NoError(t, err)
	_, err = f(context.Background())
	require.ErrorIs(t, err, errUpload)
	require.ErrorContains(t, err, "pebble: checkpoint 1: upload")

	h := backendtest.Snap(t, b, 2, state.FullSnapshotsOnly(state.PrefixedWriters(st, "op")), "sp")
	require.Nil(t, h.Incremental, "a savepoint is self-contained")
	require.Len(t, h.Offsets, keygroup.DefaultMaxParallelism)
}
