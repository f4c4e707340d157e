package heap_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/state/internal/backendtest"
)

func factory(t testing.TB, maxPar, par, index int) state.KeyedBackend {
	b, err := heap.New(heap.Config{MaxParallelism: maxPar, Parallelism: par, Index: index})
	require.NoError(t, err)
	return b
}

func TestConformance(t *testing.T) { backendtest.Run(t, factory) }

func TestModel(t *testing.T) { backendtest.Model(t, factory) }
