package pebble_test

import (
	"errors"
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
