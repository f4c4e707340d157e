package kafka_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/kafka"
)

// Savepoints taken over and over while a bounded Kafka source reads to
// its end and the job finishes: each succeeds or fails with an error, none
// hangs, and the job's exactly-once output is every record once.
func TestSavepointsWhileBoundedSourceFinishes(t *testing.T) {
	for round := range 5 {
		// Partition 0 holds most records: the subtask that reads
		// partition 1 finishes long before the other.
		addrs := broker(t, map[string]int32{"clicks": 2, "copy": 2})
		vals := clicks(3000, 3)
		produce(t, addrs, "clicks", 2, vals[:20], nil)
		produce(t, addrs, "clicks", 1, vals[20:], nil)
		env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Minute}))
		var seen atomic.Int64
		src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"clicks"},
			Deserializer: kafka.Values(strings2), Bounded: true}).UID("clicks")
		counted := weir.Map(src, func(s string) string {
			seen.Add(1)
			time.Sleep(50 * time.Microsecond) // throttle, not synchronisation
			return s
		})
		kafka.Sink(counted, kafka.SinkConfig[string]{Brokers: addrs, Topic: "copy", Value: bytesOf,
			Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "copy", TransactionTimeout: 5 * time.Minute}).UID("sink")
		j, err := env.Start(testCtx(t))
		require.NoError(t, err)
		done := make(chan struct{})
		var res error
		go func() { _, res = j.Wait(); close(done) }()
		var ok, failed int
		var errs []string
	loop:
		for {
			select {
			case <-done:
				break loop
			default:
			}
			_, err := j.TriggerSavepoint(testCtx(t), t.TempDir())
			if err == nil {
				ok++
				continue
			}
			failed++
			if !slices.Contains(errs, err.Error()) {
				errs = append(errs, err.Error())
			}
		}
		require.NoError(t, res)
		t.Logf("round %d: %d savepoints, %d failed: %q", round, ok, failed, errs)
		requireOnce(t, vals, readCommitted(t, addrs, "copy"))
	}
}

// StopWithSavepoint at points around the end of a bounded Kafka source's
// input (one subtask finished long before, the other reading its last
// records or finishing): it succeeds, and the job restored from the
// savepoint writes the rest, or it fails with an error and the job runs
// to its end; either way every record is written once.
//
// The stop that caught the subtask waiting for its final checkpoint lost
// that subtask's last transaction (about one run in eight): the restore
// handed the sink's split state to the subtask that had finished
// (internal/deploy compacted the finished subtasks away), which restores
// finished and never committed it.
func TestStopWithSavepointWhileBoundedSourceFinishes(t *testing.T) {
	const n = 3000
	for _, at := range []int64{2000, 2900, 2990, 2999, 3000} {
		addrs := broker(t, map[string]int32{"clicks": 2, "copy": 2})
		vals := clicks(n, 3)
		produce(t, addrs, "clicks", 2, vals[:20], nil)
		produce(t, addrs, "clicks", 1, vals[20:], nil)
		run := func(restore string, seen *atomic.Int64) *weir.Job {
			opts := []weir.Option{weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Minute})}
			if restore != "" {
				opts = append(opts, weir.WithRestoreFrom(restore))
			}
			env := weir.NewEnvironment(opts...)
			src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"clicks"},
				Deserializer: kafka.Values(strings2), Bounded: true}).UID("clicks")
			counted := weir.Map(src, func(s string) string {
				if seen.Add(1) >= at-50 {
					time.Sleep(200 * time.Microsecond) // throttle, not synchronisation
				}
				return s
			})
			kafka.Sink(counted, kafka.SinkConfig[string]{Brokers: addrs, Topic: "copy", Value: bytesOf,
				Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "copy", TransactionTimeout: 5 * time.Minute}).UID("sink")
			j, err := env.Start(testCtx(t))
			require.NoError(t, err)
			return j
		}
		var seen atomic.Int64
		j := run("", &seen)
		waitFor(t, func() bool { return seen.Load() >= at })
		sp, err := j.StopWithSavepoint(testCtx(t), t.TempDir())
		_, werr := j.Wait()
		require.NoError(t, werr)
		t.Logf("at %d: seen %d, savepoint %q, error %v", at, seen.Load(), sp, err)
		if err == nil {
			var seen2 atomic.Int64
			_, err := run(sp, &seen2).Wait()
			require.NoError(t, err)
		}
		requireOnce(t, vals, readCommitted(t, addrs, "copy"))
	}
}

// requireOnce fails unless got holds every value of want once, saying how
// many are missing and how many extra (not the values).
func requireOnce(t *testing.T, want, got []string) {
	t.Helper()
	counts := map[string]int{}
	for _, v := range got {
		counts[v]++
	}
	var missing, dup []string
	for _, v := range want {
		switch counts[v] {
		case 0:
			missing = append(missing, v)
		case 1:
		default:
			dup = append(dup, v)
		}
		delete(counts, v)
	}
	if len(missing)+len(dup)+len(counts) > 0 {
		t.Fatalf("%d values, want %d: %d missing (first %v), %d more than once (first %v), %d unexpected",
			len(got), len(want), len(missing), missing[:min(3, len(missing))], len(dup), dup[:min(3, len(dup))], len(counts))
	}
}
