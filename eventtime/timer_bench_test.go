package eventtime

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

const (
	timerBenchTimers = 1_000_000
	timerBenchKeys   = 10_000
)

type timerBenchKey struct {
	key   []byte
	group int
}

// timerBenchKeys returns the benchmark's keys in a fixed random order.
func timerBenchKeyList() []timerBenchKey {
	keys := make([]timerBenchKey, timerBenchKeys)
	for i := range keys {
		k := fmt.Sprintf("user-%06d", i)
		keys[i] = timerBenchKey{[]byte(k), timerTestGroup(k, 128)}
	}
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}

// timerNullBackend stores nothing: with it a benchmark measures the timer
// service's own work (queues, interning), without the backend's.
type timerNullBackend struct {
	key   []byte
	group int
}

func (b *timerNullBackend) KeyGroupRange() keygroup.Range { return keygroup.Range{Start: 0, End: 127} }
func (b *timerNullBackend) MaxParallelism() int           { return 128 }
func (b *timerNullBackend) Register(string, state.Kind) (state.StateID, error) {
	return 0, nil
}
func (b *timerNullBackend) States() []state.StateMeta { return nil }
func (b *timerNullBackend) SetCurrentKey(key []byte, g int) error {
	b.key, b.group = append(b.key[:0], key...), g
	return nil
}
func (b *timerNullBackend) CurrentKey() ([]byte, int)                       { return b.key, b.group }
func (b *timerNullBackend) Get(state.StateID, []byte) ([]byte, bool, error) { return nil, false, nil }
func (b *timerNullBackend) Put(state.StateID, []byte, []byte) error         { return nil }
func (b *timerNullBackend) Append(state.StateID, []byte) error              { return nil }
func (b *timerNullBackend) Delete(state.StateID, []byte) error              { return nil }
func (b *timerNullBackend) Clear(state.StateID) error                       { return nil }
func (b *timerNullBackend) Iterate(state.StateID, func(_, _ []byte) bool) error {
	return nil
}
func (b *timerNullBackend) Entries(state.StateID, func([]byte, int, []byte, []byte) bool) error {
	return nil
}
func (b *timerNullBackend) Snapshot(barrier.CheckpointID, state.StateWriterFactory) (state.KeyedSnapshotFunc, error) {
	return nil, nil
}
func (b *timerNullBackend) Restore([]state.KeyedStateHandle, state.StateReader) error { return nil }
func (b *timerNullBackend) Close() error                                              { return nil }

func timerBenchBackends(b *testing.B, run func(b *testing.B, be state.KeyedBackend)) {
	b.Run("backend=heap", func(b *testing.B) { run(b, timerTestBackend(b, 128, 1, 0)) })
	b.Run("backend=none", func(b *testing.B) { run(b, &timerNullBackend{}) })
}

// BenchmarkTimers registers and fires 1M event-time timers over 10,000
// keys the way a window operator does: in 100 rounds, every key (in a
// fixed random order) registers a timer at the end of the round's window,
// with the same 16-byte namespace for all keys, and the watermark then
// passes the previous round's timers. Each iteration is the whole 1M.
// backend=none measures the service without its backend's work.
func BenchmarkTimers(b *testing.B) {
	timerBenchBackends(b, func(b *testing.B, be state.KeyedBackend) {
		s, err := NewTimerService(be, "bench")
		if err != nil {
			b.Fatal(err)
		}
		keys := timerBenchKeyList()
		ns := make([]byte, 16)
		fired := 0
		fire := func(Timer) error { fired++; return nil }
		var base int64
		b.ReportAllocs()
		for b.Loop() {
			for round := range timerBenchTimers / timerBenchKeys {
				end := base + int64(round+1)*1000
				ns[7], ns[15] = byte(round), byte(round) // the window [end-1000, end)
				for i := range keys {
					be.SetCurrentKey(keys[i].key, keys[i].group)
					if err := s.RegisterEventTimeTimer(end-1, ns); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.AdvanceWatermark(end-1000, fire); err != nil {
					b.Fatal(err)
				}
			}
			base += int64(timerBenchTimers/timerBenchKeys) * 1000
			if err := s.AdvanceWatermark(base, fire); err != nil {
				b.Fatal(err)
			}
		}
		if fired != b.N*timerBenchTimers {
			b.Fatalf("fired %d timers, want %d", fired, b.N*timerBenchTimers)
		}
		b.ReportMetric(float64(fired)/b.Elapsed().Seconds(), "timers/s")
	})
}

// BenchmarkTimersBacklog registers 1M event-time timers over 10,000 keys
// (100 distinct timestamps per key, all timestamps distinct) before one
// watermark fires them all: the queue holds all 1M at once.
func BenchmarkTimersBacklog(b *testing.B) {
	timerBenchBackends(b, func(b *testing.B, be state.KeyedBackend) {
		s, err := NewTimerService(be, "bench")
		if err != nil {
			b.Fatal(err)
		}
		keys := timerBenchKeyList()
		fired := 0
		fire := func(Timer) error { fired++; return nil }
		var base int64
		b.ReportAllocs()
		for b.Loop() {
			for j := range timerBenchTimers {
				k := keys[j%timerBenchKeys]
				be.SetCurrentKey(k.key, k.group)
				if err := s.RegisterEventTimeTimer(base+int64(j*7919%timerBenchTimers), nil); err != nil {
					b.Fatal(err)
				}
			}
			base += timerBenchTimers
			if err := s.AdvanceWatermark(base, fire); err != nil {
				b.Fatal(err)
			}
		}
		if fired != b.N*timerBenchTimers {
			b.Fatalf("fired %d timers, want %d", fired, b.N*timerBenchTimers)
		}
		b.ReportMetric(float64(fired)/b.Elapsed().Seconds(), "timers/s")
	})
}
