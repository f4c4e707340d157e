package nats_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	weirnats "github.com/weirstream/weir/connectors/nats"
)

// A NATS source restored onto another stream under its UID is refused
// (weir.ErrSourceChanged naming both streams): its positions are sequence
// numbers of the stream it read. Onto the same stream it resumes there;
// onto a stream of the same name deleted and created again, it is refused
// too.
func TestSourceOnAnotherStreamRefused(t *testing.T) {
	const n, at = 2000, 500
	s := server(t)
	for _, name := range []string{"orders-2025", "orders-2026"} {
		createStream(t, s.URL(), name, name+".>")
		publish(t, s.URL(), func(i int) string { return name + "." + strconv.Itoa(i%2) }, clicks(n, 3), nil)
	}
	job := func(stream, restore string, bounded bool, seen *atomic.Int64) *weir.Environment {
		opts := []weir.Option{weir.WithParallelism(2), weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Minute})}
		if restore != "" {
			opts = append(opts, weir.WithRestoreFrom(restore))
		}
		env := weir.NewEnvironment(opts...)
		src := weirnats.Source(env, weirnats.SourceConfig[string]{URL: s.URL(), Stream: stream, Consumer: "orders",
			Deserializer: weirnats.Values(str), Bounded: bounded}).UID("orders")
		weir.Discard(weir.Map(src, func(v string) string {
			if seen.Add(1) >= at {
				time.Sleep(100 * time.Microsecond) // throttle, not synchronisation
			}
			return v
		}))
		return env
	}
	var seen atomic.Int64
	j, err := job("orders-2025", "", false, &seen).Start(testCtx(t))
	require.NoError(t, err)
	for seen.Load() < at {
		select {
		case <-testCtx(t).Done():
			t.Fatal("v1 never reached its savepoint")
		case <-time.After(5 * time.Millisecond):
		}
	}
	sp, err := j.StopWithSavepoint(testCtx(t), t.TempDir())
	require.NoError(t, err)
	_, err = j.Wait()
	require.NoError(t, err)

	var seen2 atomic.Int64
	_, err = job("orders-2026", sp, true, &seen2).Execute(testCtx(t))
	require.ErrorIs(t, err, weir.ErrSourceChanged)
	require.ErrorContains(t, err, `written by reader "nats stream orders-2025", its reader now is "nats stream orders-2026"`)
	require.Zero(t, seen2.Load(), "the refused job read nothing")

	_, err = job("orders-2025", sp, true, &seen2).Execute(testCtx(t))
	require.NoError(t, err)
	require.Positive(t, seen2.Load())
	require.LessOrEqual(t, seen2.Load(), int64(n-at), "the restored job resumed at its positions")

	// The stream deleted and created again under its name, with as many
	// messages: the old sequence numbers now number other messages, and
	// the restore is refused rather than reading on from them.
	require.NoError(t, jsClient(t, s.URL()).DeleteStream(testCtx(t), "orders-2025"))
	createStream(t, s.URL(), "orders-2025", "orders-2025.>")
	publish(t, s.URL(), func(i int) string { return "orders-2025." + strconv.Itoa(i%2) }, clicks(n, 3), nil)
	var seen3 atomic.Int64
	_, err = job("orders-2025", sp, true, &seen3).Execute(testCtx(t))
	require.ErrorIs(t, err, weir.ErrSourceChanged)
	require.ErrorContains(t, err, `stream "orders-2025" was created at`)
	require.Zero(t, seen3.Load(), "the refused job read nothing")
}
