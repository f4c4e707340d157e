package pebble_test

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/state/internal/backendtest"
	"github.com/weirstream/weir/state/pebble"
)

func TestMain(m *testing.M) {
	// Each check of the model tests opens several databases: fewer checks
	// than rapid's default 100 keep the package fast under -race
	// (-rapid.checks overrides).
	if err := flag.Set("rapid.checks", "15"); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m)
}

// small keeps the memtables and cache of test backends small.
func small(t testing.TB, cfg pebble.Config) pebble.Config {
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.MemTableSize = 1 << 20
	cfg.BlockCacheSize = 1 << 20
	return cfg
}

func factory(t testing.TB, maxPar, par, index int) state.KeyedBackend {
	b, err := pebble.New(small(t, pebble.Config{MaxParallelism: maxPar, Parallelism: par, Index: index}))
	require.NoError(t, err)
	return b
}

// tinyCache holds a handful of entries: every few accesses evict.
const tinyCache = 1 << 10

func tinyFactory(t testing.TB, maxPar, par, index int) state.KeyedBackend {
	b, err := pebble.New(small(t, pebble.Config{MaxParallelism: maxPar, Parallelism: par, Index: index, CacheBytes: tinyCache}))
	require.NoError(t, err)
	return b
}

func uncachedFactory(t testing.TB, maxPar, par, index int) state.KeyedBackend {
	b, err := pebble.New(small(t, pebble.Config{MaxParallelism: maxPar, Parallelism: par, Index: index, CacheBytes: -1}))
	require.NoError(t, err)
	return b
}

// cacheModes are the backends' cache configurations every suite runs
// under: the default cache (the state fits), a tiny one (constant
// eviction) and none.
var cacheModes = []struct {
	name string
	f    backendtest.Factory
}{{"cache=default", factory}, {"cache=tiny", tinyFactory}, {"cache=off", uncachedFactory}}

func heapFactory(t testing.TB, maxPar, par, index int) state.KeyedBackend {
	b, err := heap.New(heap.Config{MaxParallelism: maxPar, Parallelism: par, Index: index})
	require.NoError(t, err)
	return b
}

func TestConformance(t *testing.T) {
	for _, m := range cacheModes {
		t.Run(m.name, func(t *testing.T) { backendtest.Run(t, m.f) })
	}
}

func TestModel(t *testing.T) {
	for _, m := range cacheModes {
		t.Run(m.name, func(t *testing.T) { backendtest.Model(t, m.f) })
	}
}

// TestInterchangeable: a heap snapshot restores into pebble at another
// parallelism, and a pebble one back into heap.
func TestInterchangeable(t *testing.T) {
	t.Run("heap to pebble", func(t *testing.T) { backendtest.Rescale(t, heapFactory, factory) })
	t.Run("pebble to heap", func(t *testing.T) { backendtest.Rescale(t, factory, heapFactory) })
	t.Run("tiny cache to heap", func(t *testing.T) { backendtest.Rescale(t, tinyFactory, heapFactory) })
}

func TestConfig(t *testing.T) {
	require.NoError(t, pebble.Config{}.Validate())
	require.Error(t, pebble.Config{MaxParallelism: -1}.Validate())
	require.Error(t, pebble.Config{Parallelism: 4, Index: 4}.Validate())
	require.Error(t, pebble.Config{MemTableSize: 10}.Validate())
	require.Error(t, pebble.Config{BlockCacheSize: -1}.Validate())
	require.NoError(t, pebble.Config{CacheBytes: -1}.Validate())
	require.NoError(t, pebble.Config{CacheBytes: 1 << 20, DirtyBytes: 1 << 20}.Validate())
	require.Error(t, pebble.Config{CacheBytes: 1 << 20, DirtyBytes: 2 << 20}.Validate())
	require.Error(t, pebble.Config{DirtyBytes: -1}.Validate())
}

func TestWorkingDirRemovedOnClose(t *testing.T) {
	parent := t.TempDir()
	b, err := pebble.New(small(t, pebble.Config{Dir: parent}))
	require.NoError(t, err)
	_, err = os.Stat(b.Dir())
	require.NoError(t, err)
	require.NoError(t, b.Close())
	_, err = os.Stat(b.Dir())
	require.ErrorIs(t, err, os.ErrNotExist)
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestUnwritableDir(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "file")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = pebble.New(pebble.Config{Dir: f.Name()})
	require.ErrorContains(t, err, "pebble: create local state directory")
}
