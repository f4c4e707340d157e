package pebble_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/internal/backendtest"
	"github.com/weirstream/weir/state/pebble"
)

// A disk that fails writes once the database runs (full, read-only): the
// failed flush surfaces as an error of the next write, with the cause, so
// that the task fails. (Pebble stalls writes while MemTables memtables
// wait for a flush; the first failed flush is reported long before that
// many fill up, here sixteen 64 KiB ones.)
func TestDiskFailureFailsWrites(t *testing.T) {
	var fail errorfs.Toggle
	fs := errorfs.Wrap(vfs.Default, errorfs.Any(errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return fail.MaybeError(op)
		}
		return nil
	})))
	fail.Injector = errorfs.ErrInjected
	b, err := pebble.New(pebble.Config{Dir: t.TempDir(), FS: fs, MemTableSize: 64 << 10, MemTables: 16, BlockCacheSize: 1 << 20, CacheBytes: 64 << 10})
	require.NoError(t, err)
	s, err := b.Register("v", state.KindValue)
	require.NoError(t, err)
	fail.On()
	val := make([]byte, 100)
	for i := 0; ; i++ {
		k := backendtest.Key(i)
		b.SetCurrentKey(k, backendtest.Group(k, 128))
		if err = b.Put(s, nil, val); err != nil {
			break
		}
	}
	require.True(t, errors.Is(err, errorfs.ErrInjected), "%v", err)
	require.ErrorContains(t, err, "background flush or compaction")
	fail.Off()
	require.NoError(t, b.Close())
}

// The working copy never syncs (it is never recovered): a disk whose
// syncs all fail serves writes, memtable flushes, compactions and
// incremental checkpoints, which restore.
func TestWorkingCopyNeverSyncs(t *testing.T) {
	var syncs atomic.Int64
	fs := errorfs.Wrap(vfs.Default, errorfs.Any(errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			syncs.Add(1)
			return errorfs.ErrInjected
		}
		return nil
	})))
	st, err := state.NewFileStorage(state.FileStorageConfig{Dir: t.TempDir()})
	require.NoError(t, err)
	w := state.PrefixedWriters(st, "op")
	b, err := pebble.New(pebble.Config{Dir: t.TempDir(), FS: fs, MemTableSize: 64 << 10, BlockCacheSize: 1 << 20,
		CacheBytes: 16 << 10, Incremental: true})
	require.NoError(t, err)
	s, err := b.Register("v", state.KindValue)
	require.NoError(t, err)
	val := make([]byte, 100)
	const n = 5000 // some 500 KiB: memtables flush, L0 compacts
	for i := range n {
		k := backendtest.Key(i)
		require.NoError(t, b.SetCurrentKey(k, backendtest.Group(k, 128)))
		val[0] = byte(i)
		require.NoError(t, b.Put(s, nil, val))
	}
	f, err := b.Snapshot(1, w)
	require.NoError(t, err)
	h, err := f(context.Background())
	require.NoError(t, err)
	require.NotNil(t, h.Incremental)
	b.NotifyCheckpointComplete(1)
	require.NoError(t, b.Close())

	r, err := pebble.New(pebble.Config{Dir: t.TempDir(), FS: fs})
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, r.Restore([]state.KeyedStateHandle{*h}, st))
	s, err = r.Register("v", state.KindValue)
	require.NoError(t, err)
	for i := range n {
		k := backendtest.Key(i)
		require.NoError(t, r.SetCurrentKey(k, backendtest.Group(k, 128)))
		v, ok, err := r.Get(s, nil)
		require.NoError(t, err)
		require.True(t, ok, "key %d", i)
		require.Equal(t, byte(i), v[0])
	}
	require.Zero(t, syncs.Load(), "syncs reached the disk")
}
