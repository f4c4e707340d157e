package join

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

type discardOut struct{}

func (discardOut) Joined(string, string, int64) error { return nil }
func (discardOut) LateLeft(string, int64) error       { return nil }
func (discardOut) LateRight(string, int64) error      { return nil }

// TestIntervalOldLayoutRefused restores a backend holding buffers under
// the first layout's state names: NewInterval refuses them, naming the
// state, rather than misreading their frames.
func TestIntervalOldLayoutRefused(t *testing.T) {
	b, err := heap.New(heap.Config{MaxParallelism: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	id, err := b.Register("_interval/interval/left", state.KindList)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetCurrentKey([]byte("k"), 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(id, []byte{1, 'x', 0x80, 0, 0, 0, 0, 0, 0, 5}); err != nil {
		t.Fatal(err)
	}
	stor := state.NewMemoryStorage()
	run, err := b.Snapshot(barrier.CheckpointID(1), stor)
	if err != nil {
		t.Fatal(err)
	}
	h, err := run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r, err := heap.New(heap.Config{MaxParallelism: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	if err := r.Restore([]state.KeyedStateHandle{*h}, stor); err != nil {
		t.Fatal(err)
	}
	_, err = NewInterval[string, string](r, IntervalConfig{Lower: -1, Upper: 1}, codec.String(), codec.String(), discardOut{})
	if err == nil || !strings.Contains(err.Error(), `"_interval/interval/left"`) {
		t.Fatalf("NewInterval over the old layout: %v", err)
	}
}

// TestIntervalCorruptBuffer puts random bytes where a key's buffers are:
// every element of the other side, watermark and inspection fails with
// state.ErrCorruptState or goes through (bytes that happen to frame
// well), never panics.
func TestIntervalCorruptBuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		b, err := heap.New(heap.Config{MaxParallelism: 8})
		if err != nil {
			t.Fatal(err)
		}
		j, err := NewInterval[string, string](b, IntervalConfig{Lower: -5, Upper: 5}, codec.String(), codec.String(), discardOut{})
		if err != nil {
			t.Fatal(err)
		}
		key := []byte("k")
		g := keygroup.ForHash(codec.Hash64(key), 8)
		if err := b.SetCurrentKey(key, g); err != nil {
			t.Fatal(err)
		}
		// A valid element first (its cleanup timer), then garbage in
		// front of, behind or instead of its frame.
		if err := j.ProcessLeft("a", 10); err != nil {
			t.Fatal(err)
		}
		list, _, _ := b.Get(j.ids[Left], nil)
		junk := make([]byte, rng.IntN(40))
		for k := range junk {
			junk[k] = byte(rng.Uint32())
		}
		var bad []byte
		switch i % 3 {
		case 0:
			bad = append(append(bad, junk...), list...)
		case 1:
			bad = append(append(bad, list...), junk...)
		default:
			bad = junk
		}
		if err := b.Put(j.ids[Left], nil, bad); err != nil {
			t.Fatal(err)
		}
		check := func(what string, err error) {
			if err != nil && !errors.Is(err, state.ErrCorruptState) && !strings.Contains(err.Error(), "codec") {
				t.Fatalf("case %d %s: %v", i, what, err)
			}
		}
		check("right", j.ProcessRight("b", 12))
		check("left", j.ProcessLeft("c", 3))
		check("buffered", j.Buffered(Left, func([]byte, int64, string, string) error { return nil }))
		check("watermark", j.AdvanceWatermark(100))
		_ = b.Close()
	}
}
