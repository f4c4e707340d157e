package kafka_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/kafka"
)

// A topic deleted and created again under its name has a new topic ID
// and numbers other records from offset 0: a source restored onto it is
// refused (weir.ErrSourceChanged) rather than reading on from the old
// offsets, which would skip the new topic's first records without an
// error. Onto the same topic the restore resumes at its offsets.
func TestRestoreOntoRecreatedTopicRefused(t *testing.T) {
	const n = 1000
	addrs := broker(t, map[string]int32{"clicks": 2})
	produce(t, addrs, "clicks", 2, clicks(n, 3), nil)
	job := func(restore string, bounded bool, seen *atomic.Int64) *weir.Environment {
		opts := []weir.Option{weir.WithParallelism(2), weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Minute})}
		if restore != "" {
			opts = append(opts, weir.WithRestoreFrom(restore))
		}
		env := weir.NewEnvironment(opts...)
		src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"clicks"},
			Deserializer: kafka.Values(strings2), Bounded: bounded}).UID("clicks")
		weir.Discard(weir.Map(src, func(s string) string { seen.Add(1); return s }))
		return env
	}
	var seen1 atomic.Int64
	j, err := job("", false, &seen1).Start(testCtx(t))
	require.NoError(t, err)
	waitFor(t, func() bool { return seen1.Load() == n })
	sp, err := j.StopWithSavepoint(testCtx(t), t.TempDir())
	require.NoError(t, err)
	_, err = j.Wait()
	require.NoError(t, err)

	// The same topic, grown: the restore reads only what is new.
	produce(t, addrs, "clicks", 2, clicks(n, 3), nil)
	var seen2 atomic.Int64
	_, err = job(sp, true, &seen2).Execute(testCtx(t))
	require.NoError(t, err)
	require.EqualValues(t, n, seen2.Load())

	adm := admin(t, addrs)
	_, err = adm.DeleteTopics(testCtx(t), "clicks")
	require.NoError(t, err)
	_, err = adm.CreateTopics(testCtx(t), 2, 1, nil, "clicks")
	require.NoError(t, err)
	produce(t, addrs, "clicks", 2, clicks(3*n, 3), nil)
	var seen3 atomic.Int64
	_, err = job(sp, true, &seen3).Execute(testCtx(t))
	require.ErrorIs(t, err, weir.ErrSourceChanged)
	require.ErrorContains(t, err, `topic "clicks" has ID`)
	require.Zero(t, seen3.Load(), "the refused job read nothing")
}
