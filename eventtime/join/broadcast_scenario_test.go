package join

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// broadcastScenario drives op=broadcast: the KeyedBroadcast core on a real
// heap backend and operator backend, running the fixed function of
// docs/join-scenarios.md. The keyed backend serves every key group: the
// format does not route keys to subtasks (P and S decide only what a
// restore gives the subtask).
type broadcastScenario struct {
	t       *testing.T
	p, s    int
	core    *KeyedBroadcast
	keyed   *heap.Backend
	oper    *state.OperatorBackend
	storage *state.FileStorage
	snap    *broadcastSnapshot
	id      barrier.CheckpointID
}

// broadcastSnapshot is what snapshot recorded.
type broadcastSnapshot struct {
	p, s   int
	keyed  *state.KeyedStateHandle
	oper   *state.OperatorStateHandle
	timers bool
}

// broadcastMaxParallelism is the number of key groups of the scenarios'
// keyed backend.
const broadcastMaxParallelism = 128

// broadcastStateName is the fixed function's one broadcast state.
const broadcastStateName = "rules"

func newBroadcastScenario(t *testing.T, d *datadriven.TestData, a *args) (scenario, string) {
	t.Helper()
	p, s := a.optInt64("parallelism", 1), a.optInt64("subtask", 0)
	if p < 1 || p > broadcastMaxParallelism || s < 0 || s >= p {
		a.fatalf("parallelism=%d subtask=%d: want 1 <= P <= %d and 0 <= S < P", p, s, broadcastMaxParallelism)
	}
	sc := &broadcastScenario{t: t, p: int(p), s: int(s), storage: state.NewMemoryStorage()}
	sc.open(nil)
	return sc, "ok\n"
}

// open builds the backends and the core, restored from snap if set.
func (sc *broadcastScenario) open(snap *broadcastSnapshot) {
	t := sc.t
	t.Helper()
	if sc.keyed != nil {
		require.NoError(t, sc.keyed.Close())
	}
	keyed, err := heap.New(heap.Config{MaxParallelism: broadcastMaxParallelism})
	require.NoError(t, err)
	t.Cleanup(func() { _ = keyed.Close() })
	oper := state.NewOperatorBackend()
	if snap != nil {
		// The snapshot stands for every old subtask: they hold equal maps.
		handles := make([]*state.OperatorStateHandle, snap.p)
		for i := range handles {
			handles[i] = snap.oper
		}
		require.NoError(t, oper.Restore(handles, sc.storage, sc.s, sc.p))
		if snap.p == sc.p && snap.s == sc.s && snap.keyed != nil {
			require.NoError(t, keyed.Restore([]state.KeyedStateHandle{*snap.keyed}, sc.storage))
		}
	}
	core, err := NewKeyedBroadcast(keyed, oper, []BroadcastState{{Name: broadcastStateName, Key: codec.Bytes(), Value: codec.Bytes()}})
	require.NoError(t, err)
	sc.core, sc.keyed, sc.oper = core, keyed, oper
}

func (sc *broadcastScenario) run(t *testing.T, d *datadriven.TestData, a *args) string {
	t.Helper()
	rules := sc.core.States.Map(broadcastStateName)
	var lines []string
	switch d.Cmd {
	case "broadcast":
		name, v, ts := a.name("name"), a.name("v"), a.int64("ts")
		err := sc.core.ProcessBroadcast(func() error {
			if err := sc.core.RegisterEventTimeTimer(ts); err != ErrNoCurrentKey {
				return fmt.Errorf("a timer on the broadcast side: %v, want ErrNoCurrentKey", err)
			}
			return rules.Put([]byte(name), []byte(v))
		})
		require.NoError(t, err)
		lines = append(lines, fmt.Sprintf("put name=%s v=%s ts=%d wm=%d", name, v, ts, sc.core.Watermark()))
	case "element":
		key, ts := a.name("key"), a.int64("ts")
		if ts == math.MinInt64 {
			a.fatalf("ts=MIN: an element without timestamp")
		}
		timer, hasTimer := int64(0), a.has("timer")
		if hasTimer {
			timer = a.int64("timer")
		}
		err := sc.core.ProcessElement([]byte(key), keyGroup(key), func() error {
			lines = append(lines, fmt.Sprintf("read key=%s ts=%d wm=%d state={%s}", key, ts, sc.core.Watermark(), mapString(rules)))
			if err := rules.Put([]byte("x"), nil); err != ErrBroadcastReadOnly {
				return fmt.Errorf("a write on the keyed side: %v, want ErrBroadcastReadOnly", err)
			}
			if hasTimer {
				return sc.core.RegisterEventTimeTimer(timer)
			}
			return nil
		})
		require.NoError(t, err)
	case "watermark":
		in := a.int64("input")
		if in != 1 && in != 2 {
			a.fatalf("input=%d: want 1 or 2", in)
		}
		wm, rose, err := sc.core.ProcessWatermark(int(in-1), a.int64("ts"), func(tm eventtime.Timer) error {
			lines = append(lines, fmt.Sprintf("timer key=%s ts=%d state={%s}", tm.Key, tm.Timestamp, mapString(rules)))
			return nil
		})
		require.NoError(t, err)
		if rose {
			lines = append(lines, fmt.Sprintf("watermark ts=%d", wm))
		}
	case "snapshot":
		sc.snap = sc.snapshot()
	case "restore":
		if a.has("parallelism") != a.has("subtask") {
			a.fatalf("parallelism= and subtask= go together")
		}
		if sc.snap == nil {
			a.fatalf("restore before any snapshot")
		}
		p, s := int64(sc.p), int64(sc.s)
		if a.has("parallelism") {
			p, s = a.int64("parallelism"), a.int64("subtask")
		}
		if p < 1 || p > broadcastMaxParallelism || s < 0 || s >= p {
			a.fatalf("parallelism=%d subtask=%d: want 1 <= P <= %d and 0 <= S < P", p, s, broadcastMaxParallelism)
		}
		if (int(p) != sc.snap.p || int(s) != sc.snap.s) && sc.snap.timers {
			a.fatalf("a restore to another subtask of a snapshot with timers (keyed state moves by key group)")
		}
		sc.p, sc.s = int(p), int(s)
		sc.open(sc.snap)
	default:
		a.fatalf("unknown command for op=broadcast (want broadcast, element, watermark, snapshot or restore)")
	}
	return output(lines)
}

// snapshot takes a real snapshot of both backends into the scenario's
// storage.
func (sc *broadcastScenario) snapshot() *broadcastSnapshot {
	t := sc.t
	t.Helper()
	require.NoError(t, sc.core.PrepareSnapshot())
	sc.id++
	kf, err := sc.keyed.Snapshot(sc.id, sc.storage)
	require.NoError(t, err)
	of, err := sc.oper.Snapshot(sc.id, sc.storage)
	require.NoError(t, err)
	kh, err := kf(context.Background())
	require.NoError(t, err)
	oh, err := of(context.Background())
	require.NoError(t, err)
	return &broadcastSnapshot{p: sc.p, s: sc.s, keyed: kh, oper: oh, timers: sc.core.Timers().NumTimers(eventtime.TimerEventTime) > 0}
}

// keyGroup is key's key group, as a keyed exchange computes it.
func keyGroup(key string) int {
	return keygroup.ForHash(codec.HashFunc(codec.String())(key), broadcastMaxParallelism)
}

// mapString renders m as name=value entries, names in bytewise order.
func mapString(m *BroadcastMap) string {
	var parts []string
	for _, k := range m.Keys() {
		v, _ := m.Get([]byte(k))
		parts = append(parts, k+"="+string(v))
	}
	return strings.Join(parts, ",")
}
