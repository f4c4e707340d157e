//go:build soak

package weirtest_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/weirtest"
)

// soakJob is five stages, none chained, so every exchange is a real one
// (a TCP connection with TCP): a source with event timestamps, a map, a
// keyed running sum, a filter, a map into a two-phase-commit sink; the
// sums are collected too, and tumbling event-time windows over the map's
// output are summed and collected.
func soakJob(r *weirtest.R) { soakJobWith(r) }

func soakJobWith(r *weirtest.R, opts ...weir.Option) {
	env := r.Env(append([]weir.Option{weir.WithParallelism(2), weir.WithChaining(false), weir.WithBufferTimeout(time.Millisecond)}, opts...)...)
	src := weir.FromGenerator(env, 20_000, func(i int64) int64 { return i }).WithCodec(codec.Int64()).UID("numbers")
	stamped := weir.AssignTimestamps(src, weir.MonotonousTimestamps(func(i int64) int64 { return i })).UID("stamped")
	pairs := weir.Map(stamped, func(i int64) [2]int64 { return [2]int64{i % 16, i} }).WithCodec(pairCodec).UID("pairs")
	sums := weir.Reduce(weir.KeyBy(pairs, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).UID("sums")
	odd := weir.Filter(sums, func(v [2]int64) bool { return v[1]%3 != 0 }).UID("filter")
	values := weir.Map(odd, func(v [2]int64) int64 { return v[1] }).WithCodec(codec.Int64()).UID("values")
	st := newStore()
	weirtest.TwoPhaseCommitSink(r, values, codec.Int64(), func(int, int) (weir.TwoPhaseCommitter[int64, int64], error) {
		return committer{s: st}, nil
	}, nil).UID("store")
	weirtest.Collect(r, sums, func(v [2]int64) string { return strconv.FormatInt(v[0], 10) }).UID("collect")
	windows := weir.WindowReduce(weir.Window(weir.KeyBy(pairs, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		weir.TumblingWindows(250*time.Millisecond)), func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).UID("windows")
	text := weir.Map(windows, func(w weir.Windowed[int64, [2]int64]) string {
		return fmt.Sprintf("%d %v %d", w.Key, w.Window, w.Value[1])
	}).WithCodec(codec.String()).UID("text")
	weirtest.Collect(r, text, func(s string) string { k, _, _ := strings.Cut(s, " "); return k }).UID("collect-windows")
}

// TestSoak runs -weirtest.runs seeds (make soak: 1,000) of soakJob in
// each of five configurations and reports the totals: in-process or TCP,
// aligned or unaligned, and keyed state in pebble with incremental
// checkpoints.
func TestSoak(t *testing.T) {
	for _, c := range []struct {
		name           string
		tcp, unaligned bool
		pebble         bool
	}{
		{"in-process/aligned", false, false, false},
		{"in-process/unaligned", false, true, false},
		{"tcp/aligned", true, false, false},
		{"tcp/unaligned", true, true, false},
		{"pebble-incremental/in-process/aligned", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			job := soakJob
			if c.pebble {
				job = func(r *weirtest.R) {
					soakJobWith(r, weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: r.TempDir(), Incremental: true,
						BlockCacheSize: 1 << 20, MemTableSize: 1 << 20, CacheBytes: 4 << 10})))
				}
			}
			rep := weirtest.Run(t, weirtest.Config{Seeds: 1000, TCP: c.tcp, Unaligned: c.unaligned, RunTimeout: 5 * time.Minute}, job)
			var faults, fired, restarts, restored, ckpts int
			for _, s := range rep.Seeds {
				faults, fired, restarts, ckpts = faults+len(s.Faults), fired+s.Fired, restarts+s.Restarts, ckpts+s.Checkpoints
				restored += s.Restored
			}
			name := c.name
			fmt.Printf("soak %s: %d seeds passed in %v: %d faults planned, %d fired, %d restarts (%d from a checkpoint), %d checkpoints\n",
				name, len(rep.Seeds), time.Since(start).Round(time.Second), faults, fired, restarts, restored, ckpts)
			for _, l := range strings.Split(strings.TrimSpace(rep.KindTotals()), "\n") {
				fmt.Printf("soak %s:   %s\n", name, l)
			}
		})
	}
}
