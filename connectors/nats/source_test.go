package nats_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	weirnats "github.com/weirstream/weir/connectors/nats"
)

// waitFor polls cond until it holds or the test's deadline passes.
func waitFor(t *testing.T, cond func() bool) {
	ctx := testCtx(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not reached before the deadline")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Start positions, and event time from a header: Earliest reads all,
// Latest nothing (bounded), AtSequence from there; the records carry the
// header's timestamps.
func TestStartPositionsAndHeaderTime(t *testing.T) {
	s := server(t)
	createStream(t, s.URL(), "t", "t.*")
	base := int64(1_700_000_000_000)
	publish(t, s.URL(), func(i int) string { return "t." + strconv.Itoa(i%2) }, clicks(100, 1), func(i int) natsgo.Header {
		return natsgo.Header{"Event-Time": []string{strconv.FormatInt(base+int64(i), 10)}}
	})
	read := func(start weirnats.StartPosition) []int64 {
		env := weir.NewEnvironment(weir.WithParallelism(2))
		src := weirnats.Source(env, weirnats.SourceConfig[string]{URL: s.URL(), Stream: "t", Consumer: "start",
			Subjects: []string{"t.0", "t.1"}, Deserializer: weirnats.Values(str), Bounded: true, Start: start,
			TimestampHeader: "Event-Time"})
		var ts []int64
		got, _ := weir.Collect(weir.Process(weir.KeyBy(src, func(string) string { return "" }, codec.String()),
			func() weir.KeyedProcessFunction[string, string, int64] {
				var rc *weir.RuntimeContext
				return weir.ProcessFunc(func(c *weir.RuntimeContext) error { rc = c; return nil },
					func(_ string, _ string, out *weir.Collector[int64]) error { out.Emit(rc.Timestamp()); return nil })
			}))
		_, err := env.Execute(testCtx(t))
		require.NoError(t, err)
		ts = got.Values()
		slices.Sort(ts)
		return ts
	}
	all := read(weirnats.Earliest())
	require.Len(t, all, 100)
	require.Equal(t, base, all[0])
	require.Equal(t, base+99, all[99])
	require.Empty(t, read(weirnats.Latest()))
	from := read(weirnats.AtSequence(91))
	require.Len(t, from, 10)
	require.Equal(t, base+90, from[0])
}

// A header that is not a timestamp fails the job naming the message, or
// is skipped and counted.
func TestBadMessages(t *testing.T) {
	s := server(t)
	createStream(t, s.URL(), "t", "t")
	publish(t, s.URL(), func(int) string { return "t" }, []string{"1", "2", "3"}, func(i int) natsgo.Header {
		if i == 1 {
			return natsgo.Header{"Event-Time": []string{"yesterday"}}
		}
		return natsgo.Header{"Event-Time": []string{"5"}}
	})
	cfg := weirnats.SourceConfig[string]{URL: s.URL(), Stream: "t", Consumer: "bad", Deserializer: weirnats.Values(str),
		Bounded: true, TimestampHeader: "Event-Time"}
	env := weir.NewEnvironment()
	weir.Discard(weirnats.Source(env, cfg))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, `nats: source t: stream sequence 2: header Event-Time: "yesterday" is not unix milliseconds`)

	var skipped atomic.Int64
	cfg.SkipBadRecords, cfg.Skipped = true, &skipped
	env = weir.NewEnvironment()
	got, _ := weir.Collect(weirnats.Source(env, cfg))
	_, err = env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, []string{"1", "3"}, got.Values())
	require.EqualValues(t, 1, skipped.Load())
}

// On a work-queue stream, which removes what its consumer acknowledges,
// messages are acknowledged only once a checkpoint covering them
// completes: while none completes, the stream keeps them all; once the
// job has checkpointed everything, they are gone.
func TestAcksOnlyAfterCheckpoints(t *testing.T) {
	s := server(t)
	createStreamWith(t, s.URL(), jetstream.StreamConfig{Name: "work", Subjects: []string{"work"}, Retention: jetstream.WorkQueuePolicy})
	publish(t, s.URL(), func(int) string { return "work" }, clicks(500, 3), nil)
	msgs := func() uint64 {
		st, err := jsClient(t, s.URL()).Stream(testCtx(t), "work")
		require.NoError(t, err)
		return st.CachedInfo().State.Msgs
	}
	run := func(interval time.Duration, wait func(seen *atomic.Int64) bool) {
		env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: interval}))
		var seen atomic.Int64
		src := weirnats.Source(env, weirnats.SourceConfig[string]{URL: s.URL(), Stream: "work", Consumer: "work",
			Deserializer: weirnats.Values(str)})
		weir.Discard(weir.Map(src, func(v string) string { seen.Add(1); return v }))
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		j, err := env.Start(ctx)
		require.NoError(t, err)
		waitFor(t, func() bool { return wait(&seen) })
		j.Cancel()
		_, err = j.Wait()
		require.ErrorIs(t, err, context.Canceled)
	}
	// Checkpoints an hour apart: everything read, nothing acknowledged.
	run(time.Hour, func(seen *atomic.Int64) bool { return seen.Load() == 500 })
	require.EqualValues(t, 500, msgs(), "messages were acknowledged before a checkpoint completed")
	// Checkpoints every 10 ms: the stream empties.
	run(10*time.Millisecond, func(*atomic.Int64) bool { return msgs() == 0 })
}

// A savepoint at parallelism 3, restored at 2 (and 1 to 3): every subject
// partition moves to its new owner with its position, so the two runs
// together read every message exactly once.
func TestRestoreAtAnotherParallelism(t *testing.T) {
	for _, ps := range [][2]int{{3, 2}, {1, 3}} {
		t.Run(fmt.Sprintf("%d-to-%d", ps[0], ps[1]), func(t *testing.T) {
			s := server(t)
			createStream(t, s.URL(), "clicks", "clicks.*")
			createStream(t, s.URL(), "copy", "copy")
			all := clicks(3000, 3)
			first, second := all[:2000], all[2000:]
			publish(t, s.URL(), clickSubject, first, nil)
			dir := t.TempDir()
			run := func(par int, restore string, bounded bool, seen *atomic.Int64) *weir.Job {
				opts := []weir.Option{weir.WithParallelism(par), weir.WithBufferTimeout(time.Millisecond),
					weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Minute})}
				if restore != "" {
					opts = append(opts, weir.WithRestoreFrom(restore))
				}
				env := weir.NewEnvironment(opts...)
				src := weirnats.Source(env, weirnats.SourceConfig[string]{URL: s.URL(), Stream: "clicks", Consumer: "copy",
					Subjects: weirnats.PartitionSubjects("clicks.%d", partitions), Deserializer: weirnats.Values(str), Bounded: bounded}).UID("clicks")
				counted := weir.Map(src, func(s string) string { seen.Add(1); return s })
				weirnats.Sink(counted, weirnats.SinkConfig[string]{URL: s.URL(), Subject: "copy", Value: bytesOf,
					Guarantee: weirnats.ExactlyOnce, MsgIDPrefix: "copy"}).UID("sink")
				j, err := env.Start(testCtx(t))
				require.NoError(t, err)
				return j
			}
			var seen1, seen2 atomic.Int64
			j := run(ps[0], "", false, &seen1)
			waitFor(t, func() bool { return seen1.Load() == int64(len(first)) })
			sp, err := j.StopWithSavepoint(testCtx(t), dir)
			require.NoError(t, err)
			_, err = j.Wait()
			require.NoError(t, err)
			publish(t, s.URL(), func(i int) string { return clickSubject(i + len(first)) }, second, nil)
			j = run(ps[1], sp, true, &seen2)
			_, err = j.Wait()
			require.NoError(t, err)
			require.EqualValues(t, len(second), seen2.Load(), "the restored run read messages again or missed some")
			got := readStream(t, s.URL(), "copy")
			slices.Sort(got)
			want := slices.Clone(all)
			slices.Sort(want)
			require.Equal(t, want, got)
		})
	}
}

// Per-split watermarks: subject a is 10 s ahead in event time, b behind,
// c empty. The lagging split's records are not late, and windows fire
// while the job runs (the empty split turns idle).
func TestPerSplitWatermarksWithAnIdleSplit(t *testing.T) {
	s := server(t)
	createStream(t, s.URL(), "events", "ev.*")
	base := int64(1_700_000_000_000)
	var vals []string
	for range 400 {
		vals = append(vals, "ahead", "behind")
	}
	// Message i: "ahead" on ev.a, "behind" on ev.b, 10 ms apart per pair.
	publish(t, s.URL(), func(i int) string { return []string{"ev.a", "ev.b"}[i%2] }, vals, func(i int) natsgo.Header {
		ts := base + int64(i/2)*10
		if i%2 == 0 {
			ts += 10_000
		}
		return natsgo.Header{"Event-Time": []string{strconv.FormatInt(ts, 10)}}
	})
	env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithBufferTimeout(time.Millisecond),
		weir.WithAutoWatermarkInterval(5*time.Millisecond))
	src := weirnats.Source(env, weirnats.SourceConfig[string]{URL: s.URL(), Stream: "events", Consumer: "wm",
		Subjects: []string{"ev.a", "ev.b", "ev.c"}, Deserializer: weirnats.Values(str), TimestampHeader: "Event-Time",
		Watermarks: weir.BoundedOutOfOrderness[string](0, nil).WithIdleness(time.Second)})
	ws := weir.Window(weir.KeyBy(weir.Map(src, func(s string) count { return count{s, 1} }).WithCodec(countCodec),
		func(c count) string { return c.User }, codec.String()), weir.TumblingWindows(time.Second))
	fired := make(chan weir.Windowed[string, count], 100)
	weir.SinkFunc(weir.WindowReduce(ws, func(a, b count) count { a.N += b.N; return a }), func(w weir.Windowed[string, count]) error {
		fired <- w
		return nil
	})
	var late atomic.Int64
	weir.SinkFunc(ws.LateData(), func(count) error { late.Add(1); return nil })
	ctx := testCtx(t)
	j, err := env.Start(ctx)
	require.NoError(t, err)
	// The behind split's first window closes once its watermark passes it
	// (the ahead split is ahead, ev.c idle).
	select {
	case w := <-fired:
		require.Equal(t, "behind", w.Key)
		require.EqualValues(t, 100, w.Value.N)
	case <-ctx.Done():
		t.Fatal("no window fired: the empty split stalled event time")
	}
	j.Cancel()
	_, err = j.Wait()
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, late.Load(), "records of the lagging split were late")
}
