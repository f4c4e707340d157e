package eventtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

func timerTestBackend(t testing.TB, maxPar, par, index int) *heap.Backend {
	b, err := heap.New(heap.Config{MaxParallelism: maxPar, Parallelism: par, Index: index})
	require.NoError(t, err)
	return b
}

func timerTestGroup(key string, maxPar int) int {
	return keygroup.ForHash(codec.Hash64([]byte(key)), maxPar)
}

func timerTestSetKey(b state.KeyedBackend, key string) {
	b.SetCurrentKey([]byte(key), timerTestGroup(key, b.MaxParallelism()))
}

// timerRec is a fired timer as tests record it.
type timerRec struct {
	ts  int64
	key string
	ns  string
}

func (r timerRec) String() string { return fmt.Sprintf("%d/%s/%s", r.ts, r.key, r.ns) }

func timerRecLess(a, b timerRec) int {
	if a.ts != b.ts {
		if a.ts < b.ts {
			return -1
		}
		return 1
	}
	if c := bytes.Compare([]byte(a.key), []byte(b.key)); c != 0 {
		return c
	}
	return bytes.Compare([]byte(a.ns), []byte(b.ns))
}

// timerRecorder returns a TimerFunc that records fired timers and checks
// that the backend's current key is the timer's.
func timerRecorder(t *testing.T, b state.KeyedBackend, out *[]timerRec) TimerFunc {
	return func(tm Timer) error {
		k, g := b.CurrentKey()
		require.Equal(t, tm.Key, k)
		require.Equal(t, tm.KeyGroup, g)
		*out = append(*out, timerRec{tm.Timestamp, string(tm.Key), string(tm.Namespace)})
		return nil
	}
}

func TestTimerOrderAndDedup(t *testing.T) {
	b := timerTestBackend(t, 128, 1, 0)
	s, err := NewTimerService(b, "t")
	require.NoError(t, err)
	require.Equal(t, int64(math.MinInt64), s.CurrentWatermark())
	require.Equal(t, int64(math.MinInt64), s.CurrentProcessingTime())

	var all []timerRec
	rng := rand.New(rand.NewPCG(3, 4))
	for _, key := range []string{"b", "a", "ab", "", "\xff", "a\x00"} {
		for _, ns := range []string{"", "x", "\x00", "xy", "y"} {
			for _, ts := range []int64{math.MinInt64, -5, 0, 5, 10, math.MaxInt64} {
				all = append(all, timerRec{ts, key, ns})
			}
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for i, r := range all {
		timerTestSetKey(b, r.key)
		require.NoError(t, s.RegisterEventTimeTimer(r.ts, []byte(r.ns)))
		if i%3 == 0 { // registering again does nothing
			require.NoError(t, s.RegisterEventTimeTimer(r.ts, []byte(r.ns)))
		}
	}
	require.Equal(t, len(all), s.NumTimers(TimerEventTime))
	require.Zero(t, s.NumTimers(TimerProcessingTime))
	id, err := b.Register("_timers/t/event", state.KindMap)
	require.NoError(t, err)
	stored := func() int {
		n := 0
		require.NoError(t, b.Entries(id, func(_ []byte, _ int, _, _ []byte) bool { n++; return true }))
		return n
	}
	require.Zero(t, stored(), "timers reach the backend at Flush")
	timerTestSetKey(b, "current")
	require.NoError(t, s.Flush())
	require.Equal(t, len(all), stored())
	k, _ := b.CurrentKey()
	require.Equal(t, "current", string(k), "Flush keeps the current key")
	next, ok := s.NextEventTime()
	require.True(t, ok)
	require.Equal(t, int64(math.MinInt64), next)
	_, ok = s.NextProcessingTime()
	require.False(t, ok)

	slices.SortFunc(all, timerRecLess)
	var fired []timerRec
	require.NoError(t, s.AdvanceWatermark(5, timerRecorder(t, b, &fired)))
	require.Equal(t, int64(5), s.CurrentWatermark())
	n5 := slices.IndexFunc(all, func(r timerRec) bool { return r.ts > 5 })
	require.Equal(t, all[:n5], fired)
	// An equal watermark fires nothing new; MaxInt64 fires the rest.
	fired = nil
	require.NoError(t, s.AdvanceWatermark(5, timerRecorder(t, b, &fired)))
	require.Empty(t, fired)
	require.NoError(t, s.AdvanceWatermark(math.MaxInt64, timerRecorder(t, b, &fired)))
	require.Equal(t, all[n5:], fired)
	require.Zero(t, s.NumTimers(TimerEventTime))
	require.NoError(t, s.Flush())
	require.Zero(t, stored(), "fired timers leave the backend")
}

func TestTimerDelete(t *testing.T) {
	b := timerTestBackend(t, 128, 1, 0)
	s, err := NewTimerService(b, "")
	require.NoError(t, err)
	timerTestSetKey(b, "k")
	for ts := range int64(5) {
		require.NoError(t, s.RegisterProcessingTimeTimer(ts, []byte("w")))
	}
	require.NoError(t, s.DeleteProcessingTimeTimer(0, []byte("w")))
	require.NoError(t, s.DeleteProcessingTimeTimer(0, []byte("w")), "deleting twice")
	require.NoError(t, s.DeleteProcessingTimeTimer(7, []byte("w")), "deleting a missing timer")
	require.NoError(t, s.DeleteEventTimeTimer(1, []byte("w")), "other domain")
	require.NoError(t, s.DeleteProcessingTimeTimer(2, []byte("w")))
	require.NoError(t, s.RegisterProcessingTimeTimer(2, []byte("w")), "re-registered after delete")
	require.NoError(t, s.DeleteProcessingTimeTimer(3, []byte("w")))
	require.Equal(t, 3, s.NumTimers(TimerProcessingTime))
	next, ok := s.NextProcessingTime()
	require.True(t, ok)
	require.Equal(t, int64(1), next, "the deleted timer at 0 is skipped")

	var fired []timerRec
	require.NoError(t, s.AdvanceProcessingTime(10, timerRecorder(t, b, &fired)))
	require.Equal(t, []timerRec{{1, "k", "w"}, {2, "k", "w"}, {4, "k", "w"}}, fired)
	_, ok = s.NextProcessingTime()
	require.False(t, ok)
	require.Zero(t, s.keys.len(), "no key stays interned without timers")
}

// Many deletes rebuild the queue: the stale entries go, the live ones stay.
func TestTimerCompaction(t *testing.T) {
	b := timerTestBackend(t, 128, 1, 0)
	s, err := NewTimerService(b, "")
	require.NoError(t, err)
	const n = 1000
	for i := range n {
		timerTestSetKey(b, fmt.Sprint("k", i%10))
		require.NoError(t, s.RegisterEventTimeTimer(int64(i), nil))
	}
	for i := range n {
		if i%5 != 0 {
			timerTestSetKey(b, fmt.Sprint("k", i%10))
			require.NoError(t, s.DeleteEventTimeTimer(int64(i), nil))
		}
	}
	require.Equal(t, n/5, s.NumTimers(TimerEventTime))
	require.Less(t, s.q[TimerEventTime].len(), 2*n/5+timerCompactMin+1, "queue rebuilt")
	var fired []timerRec
	require.NoError(t, s.AdvanceWatermark(n, timerRecorder(t, b, &fired)))
	require.Len(t, fired, n/5)
	for i, r := range fired {
		require.Equal(t, int64(5*i), r.ts)
	}
}

// Timers registered by a firing timer take part at once when due.
func TestTimerFireDuringFire(t *testing.T) {
	b := timerTestBackend(t, 128, 1, 0)
	s, err := NewTimerService(b, "")
	require.NoError(t, err)
	timerTestSetKey(b, "a")
	require.NoError(t, s.RegisterEventTimeTimer(10, nil))
	timerTestSetKey(b, "b")
	require.NoError(t, s.RegisterEventTimeTimer(10, nil))
	var fired []timerRec
	rec := timerRecorder(t, b, &fired)
	again := true
	err = s.AdvanceWatermark(30, func(tm Timer) error {
		require.NoError(t, rec(tm))
		switch {
		case string(tm.Key) == "a" && tm.Timestamp == 10 && again:
			again = false
			// Same timestamp, same key, later namespace: still due now.
			require.NoError(t, s.RegisterEventTimeTimer(10, []byte("n")))
			// Re-registering the firing timer brings it back.
			require.NoError(t, s.RegisterEventTimeTimer(10, nil))
			// Another key, earlier than what is queued: next.
			timerTestSetKey(b, "c")
			require.NoError(t, s.RegisterEventTimeTimer(5, nil))
			// Beyond the watermark: stays.
			require.NoError(t, s.RegisterEventTimeTimer(31, nil))
			require.Error(t, s.AdvanceWatermark(40, rec), "no nested advance")
		case tm.Timestamp < 30 && string(tm.Key) == "c":
			require.NoError(t, s.RegisterEventTimeTimer(tm.Timestamp+10, nil))
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []timerRec{
		{10, "a", ""}, {5, "c", ""}, {10, "a", ""}, {10, "a", "n"}, {10, "b", ""},
		{15, "c", ""}, {25, "c", ""},
	}, fired)
	require.Equal(t, 2, s.NumTimers(TimerEventTime)) // c at 31 and 35
	require.Equal(t, int64(30), s.CurrentWatermark())
}

func TestTimerErrors(t *testing.T) {
	_, err := NewTimerService(nil, "x")
	require.Error(t, err)
	b := timerTestBackend(t, 128, 1, 0)
	_, err = NewTimerService(b, "a/b")
	require.Error(t, err)
	_, err = b.Register("_timers/v/event", state.KindValue)
	require.NoError(t, err)
	_, err = NewTimerService(b, "v")
	require.Error(t, err, "state name taken by another kind")

	s, err := NewTimerService(b, "")
	require.NoError(t, err)
	require.Error(t, s.RegisterEventTimeTimer(1, nil), "no current key")
	require.Error(t, s.DeleteProcessingTimeTimer(1, nil), "no current key")

	timerTestSetKey(b, "k")
	for ts := range int64(3) {
		require.NoError(t, s.RegisterEventTimeTimer(ts, nil))
	}
	boom := errors.New("boom")
	calls := 0
	err = s.AdvanceWatermark(10, func(Timer) error { calls++; return boom })
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, calls)
	require.Equal(t, 2, s.NumTimers(TimerEventTime), "the failed timer is gone, the rest stay")
	var fired []timerRec
	require.NoError(t, s.AdvanceWatermark(10, timerRecorder(t, b, &fired)))
	require.Len(t, fired, 2)
	require.Equal(t, "event-time", TimerEventTime.String())
	require.Equal(t, "processing-time", TimerProcessingTime.String())
}

// timerSnapshot snapshots backends of one operator into stor and returns
// the handles.
func timerSnapshot(t *testing.T, stor *state.FileStorage, id barrier.CheckpointID, bs ...*heap.Backend) []state.KeyedStateHandle {
	var hs []state.KeyedStateHandle
	for i, b := range bs {
		run, err := b.Snapshot(id, state.PrefixedWriters(stor, fmt.Sprint("sub", i)))
		require.NoError(t, err)
		h, err := run(context.Background())
		require.NoError(t, err)
		hs = append(hs, *h)
	}
	return hs
}

// Timers are keyed state: restored at another parallelism, each subtask
// gets exactly the timers of its key groups, and together they fire what
// the original would have.
func TestTimerRestoreRescaled(t *testing.T) {
	const maxPar = 16
	stor := state.NewMemoryStorage()
	b := timerTestBackend(t, maxPar, 1, 0)
	s, err := NewTimerService(b, "w")
	require.NoError(t, err)
	var wantEvent, wantProc []timerRec
	for i := range 200 {
		key := fmt.Sprint("key", i)
		timerTestSetKey(b, key)
		for j := range 3 {
			ts := int64(i%7*10 + j)
			require.NoError(t, s.RegisterEventTimeTimer(ts, []byte{byte(j)}))
			require.NoError(t, s.RegisterProcessingTimeTimer(-ts, nil))
			if j == 1 {
				require.NoError(t, s.DeleteEventTimeTimer(ts, []byte{byte(j)}))
			} else {
				wantEvent = append(wantEvent, timerRec{ts, key, string([]byte{byte(j)})})
			}
			wantProc = append(wantProc, timerRec{-ts, key, ""})
		}
	}
	// Fire some before the snapshot: they are not restored.
	var early []timerRec
	require.NoError(t, s.AdvanceWatermark(0, timerRecorder(t, b, &early)))
	require.NotEmpty(t, early)
	wantEvent = slices.DeleteFunc(wantEvent, func(r timerRec) bool { return r.ts <= 0 })
	require.NoError(t, s.Flush())
	hs := timerSnapshot(t, stor, 1, b)
	// Changes after the snapshot are not in it.
	timerTestSetKey(b, "late")
	require.NoError(t, s.RegisterEventTimeTimer(1, nil))

	for _, par := range []int{1, 2, 3} {
		var gotEvent, gotProc []timerRec
		for idx := range par {
			r := timerTestBackend(t, maxPar, par, idx)
			require.NoError(t, r.Restore(hs, stor))
			rs, err := NewTimerService(r, "w")
			require.NoError(t, err)
			require.Equal(t, int64(math.MinInt64), rs.CurrentWatermark(), "the watermark is not restored")
			var ev, pr []timerRec
			require.NoError(t, rs.AdvanceWatermark(math.MaxInt64, timerRecorder(t, r, &ev)))
			require.NoError(t, rs.AdvanceProcessingTime(math.MaxInt64, timerRecorder(t, r, &pr)))
			require.True(t, slices.IsSortedFunc(ev, timerRecLess))
			for _, rec := range append(ev, pr...) {
				require.True(t, r.KeyGroupRange().Contains(timerTestGroup(rec.key, maxPar)))
			}
			gotEvent = append(gotEvent, ev...)
			gotProc = append(gotProc, pr...)
		}
		slices.SortFunc(gotEvent, timerRecLess)
		slices.SortFunc(gotProc, timerRecLess)
		slices.SortFunc(wantEvent, timerRecLess)
		slices.SortFunc(wantProc, timerRecLess)
		require.Equal(t, wantEvent, gotEvent, "parallelism %d", par)
		require.Equal(t, wantProc, gotProc, "parallelism %d", par)
	}
}

// The service against a naive model (a sorted list) over random registers,
// deletes, advances, snapshots and restores.
func TestTimerAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { timerModelRun(t, seed, 12) })
	}
	// Two keys: each has many timers (found through its index), many
	// freed and reused slots.
	for seed := range uint64(10) {
		t.Run(fmt.Sprint("keys2/seed", seed), func(t *testing.T) { timerModelRun(t, seed, 2) })
	}
}

// timerModelKey names key i of a model run: short keys, and every third
// one longer than the 16 bytes a key record holds inline, all of those
// with the same first 16 bytes (so they order by their whole keys).
func timerModelKey(i int) string {
	if i%3 == 1 {
		return fmt.Sprint("a-long-shared-prefix-", i)
	}
	return fmt.Sprint("k", i)
}

func timerModelRun(t *testing.T, seed uint64, keys int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	const maxPar = 8
	stor := state.NewMemoryStorage()
	b := timerTestBackend(t, maxPar, 1, 0)
	s, err := NewTimerService(b, "m")
	require.NoError(t, err)
	var model [2][]timerRec
	var wm, now int64 = math.MinInt64, math.MinInt64
	var snapModel [2][]timerRec
	var snapHandles []state.KeyedStateHandle
	randTimer := func(base int64) timerRec {
		if base == math.MinInt64 {
			base = 0
		}
		return timerRec{base + rng.Int64N(40) - 5, timerModelKey(rng.IntN(keys)), []string{"", "a", "b"}[rng.IntN(3)]}
	}
	for step := range 3000 {
		d := TimerDomain(rng.IntN(2))
		base := []int64{wm, now}[d]
		switch op := rng.IntN(20); {
		case op < 9:
			r := randTimer(base)
			timerTestSetKey(b, r.key)
			if d == TimerEventTime {
				require.NoError(t, s.RegisterEventTimeTimer(r.ts, []byte(r.ns)))
			} else {
				require.NoError(t, s.RegisterProcessingTimeTimer(r.ts, []byte(r.ns)))
			}
			if !slices.Contains(model[d], r) {
				model[d] = append(model[d], r)
			}
		case op < 14:
			r := randTimer(base)
			if len(model[d]) > 0 && rng.IntN(2) == 0 {
				r = model[d][rng.IntN(len(model[d]))]
			}
			timerTestSetKey(b, r.key)
			if d == TimerEventTime {
				require.NoError(t, s.DeleteEventTimeTimer(r.ts, []byte(r.ns)))
			} else {
				require.NoError(t, s.DeleteProcessingTimeTimer(r.ts, []byte(r.ns)))
			}
			model[d] = slices.DeleteFunc(model[d], func(x timerRec) bool { return x == r })
		case op < 18:
			t0 := base
			if t0 == math.MinInt64 {
				t0 = 0
			}
			t0 += rng.Int64N(15)
			// The model: fire everything due, in order; a firing timer of
			// key k0 registers one more (t+3) with probability 1/3.
			var want []timerRec
			var got []timerRec
			for {
				slices.SortFunc(model[d], timerRecLess)
				if len(model[d]) == 0 || model[d][0].ts > t0 {
					break
				}
				r := model[d][0]
				model[d] = model[d][1:]
				want = append(want, r)
				if r.key == "k0" && r.ts%3 == 0 {
					n := timerRec{r.ts + 3, r.key, "x"}
					if !slices.Contains(model[d], n) {
						model[d] = append(model[d], n)
					}
				}
			}
			fire := func(tm Timer) error {
				r := timerRec{tm.Timestamp, string(tm.Key), string(tm.Namespace)}
				got = append(got, r)
				if r.key == "k0" && r.ts%3 == 0 {
					if d == TimerEventTime {
						return s.RegisterEventTimeTimer(r.ts+3, []byte("x"))
					}
					return s.RegisterProcessingTimeTimer(r.ts+3, []byte("x"))
				}
				return nil
			}
			if d == TimerEventTime {
				wm = t0
				require.NoError(t, s.AdvanceWatermark(t0, fire))
			} else {
				now = t0
				require.NoError(t, s.AdvanceProcessingTime(t0, fire))
			}
			require.Equal(t, want, got, "step %d", step)
		case op < 19:
			require.NoError(t, s.Flush())
			snapHandles = timerSnapshot(t, stor, barrier.CheckpointID(step+1), b)
			snapModel = [2][]timerRec{slices.Clone(model[0]), slices.Clone(model[1])}
		default:
			if snapHandles == nil {
				continue
			}
			b = timerTestBackend(t, maxPar, 1, 0)
			require.NoError(t, b.Restore(snapHandles, stor))
			s, err = NewTimerService(b, "m")
			require.NoError(t, err)
			model = [2][]timerRec{slices.Clone(snapModel[0]), slices.Clone(snapModel[1])}
			wm, now = math.MinInt64, math.MinInt64
		}
		require.Equal(t, len(model[0]), s.NumTimers(TimerEventTime), "step %d", step)
		require.Equal(t, len(model[1]), s.NumTimers(TimerProcessingTime), "step %d", step)
		if len(model[1]) > 0 {
			next, ok := s.NextProcessingTime()
			require.True(t, ok)
			require.Equal(t, slices.MinFunc(model[1], timerRecLess).ts, next)
		} else {
			_, ok := s.NextProcessingTime()
			require.False(t, ok)
		}
	}
}

// Without snapshots (a job without checkpoints) nothing is flushed: the
// list of keys to flush stays bounded by the keys that have timers.
func TestTimerDirtyListBounded(t *testing.T) {
	b := timerTestBackend(t, 128, 1, 0)
	s, err := NewTimerService(b, "")
	require.NoError(t, err)
	fire := func(Timer) error { return nil }
	for round := range int64(50) {
		for i := range 1000 {
			timerTestSetKey(b, fmt.Sprint("k", round, "-", i))
			require.NoError(t, s.RegisterEventTimeTimer(round, nil))
		}
		require.NoError(t, s.AdvanceWatermark(round, fire))
		// At most 1,000 keys have timers at a time; 50,000 were marked.
		require.LessOrEqual(t, len(s.dirty), 2*1000+1024+1)
	}
	require.Zero(t, s.keys.len())
	require.NoError(t, s.Flush())
	require.Empty(t, s.dirty)
}

// RegisterTimerFor registers for the given key, not the backend's current
// one, and leaves the current key alone.
func TestRegisterTimerFor(t *testing.T) {
	b := timerTestBackend(t, 128, 1, 0)
	s, err := NewTimerService(b, "")
	require.NoError(t, err)
	timerTestSetKey(b, "current")
	require.NoError(t, s.RegisterTimerFor(TimerEventTime, []byte("other"), timerTestGroup("other", 128), 5, []byte("w")))
	require.NoError(t, s.RegisterTimerFor(TimerEventTime, []byte("other"), timerTestGroup("other", 128), 5, []byte("w")), "again: nothing")
	require.Error(t, s.RegisterTimerFor(TimerEventTime, []byte("x"), -1, 5, nil))
	require.Error(t, s.RegisterTimerFor(TimerDomain(7), []byte("x"), 0, 5, nil))
	k, _ := b.CurrentKey()
	require.Equal(t, "current", string(k))
	var fired []timerRec
	require.NoError(t, s.AdvanceWatermark(5, timerRecorder(t, b, &fired)))
	require.Equal(t, []timerRec{{5, "other", "w"}}, fired)
}
