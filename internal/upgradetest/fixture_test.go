package upgradetest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// fixtureJob is the job of the committed savepoint testdata/v4-savepoint:
// the keyed running sum of spec{uids: true}, collected in memory (a sink
// whose state restores anywhere).
func fixtureJob(env *weir.Environment, reached chan struct{}) *weir.Collected[string] {
	var seen atomic.Int64
	var once sync.Once
	src := weir.FromGenerator(env, n, func(i int64) rec { return rec{i % keys, i} }).WithCodec(recCodec).Parallelism(1).UID("source")
	s := weir.Map(src, func(r rec) rec {
		if reached != nil && seen.Add(1) >= at {
			once.Do(func() { close(reached) })
			time.Sleep(100 * time.Microsecond) // throttle, not synchronisation
		}
		return r
	}).WithCodec(recCodec).Parallelism(1)
	sums := weir.Process(weir.KeyBy(s, key, codec.Int64()), func() weir.KeyedProcessFunction[int64, rec, string] {
		st := &int64Sum{}
		return weir.ProcessFunc(func(c *weir.RuntimeContext) error { return st.open(c) },
			func(k int64, r rec, out *weir.Collector[string]) error {
				sum, err := st.add(nil, r[1])
				out.Emit(fmt.Sprintf("%d,%d", k, sum))
				return err
			})
	}).UID("sum")
	got, sink := weir.Collect(sums)
	sink.UID("sink")
	return got
}

// TestWriteV4Fixture writes testdata/v4-savepoint with the weir of the
// moment (WEIR_WRITE_FIXTURE=1): it was written by weir's metadata
// version 4, before operators recorded their names and state schemas.
func TestWriteV4Fixture(t *testing.T) {
	if os.Getenv("WEIR_WRITE_FIXTURE") == "" {
		t.Skip("set WEIR_WRITE_FIXTURE=1 to rewrite testdata/v4-savepoint")
	}
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	reached := make(chan struct{})
	fixtureJob(env, reached)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	<-reached
	sp, err := job.TriggerSavepoint(testCtx(t), t.TempDir())
	require.NoError(t, err)
	job.Cancel()
	_, _ = job.Wait()
	dst := filepath.Join("testdata", "v4-savepoint")
	require.NoError(t, os.RemoveAll(dst))
	require.NoError(t, os.CopyFS(dst, os.DirFS(sp)))
}

// A savepoint of metadata version 4 (weir before operators recorded
// their names and state schemas, testdata/v4-savepoint) restores into
// today's weir, from another directory than it was written in: every
// operator finds its state (no schema to check), and the job completes
// the exact output. Its names are not recorded: an unmatched operator is
// named by its ID.
func TestRestoresVersion4Savepoint(t *testing.T) {
	sp := filepath.Join(t.TempDir(), "sp")
	require.NoError(t, os.CopyFS(sp, os.DirFS(filepath.Join("testdata", "v4-savepoint"))))
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}),
		weir.WithRestoreFrom(sp))
	got := fixtureJob(env, nil)
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	lines := got.Values()
	slices.Sort(lines)
	requireLines(t, want(n), lines)

	// Without the sum: refused, naming its ID.
	env = weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}),
		weir.WithRestoreFrom(sp))
	src := weir.FromGenerator(env, n, func(i int64) rec { return rec{i % keys, i} }).WithCodec(recCodec).Parallelism(1).UID("source")
	weir.Collect(weir.Map(src, func(r rec) string { return "" }))
	_, err = env.Execute(testCtx(t))
	require.ErrorIs(t, err, weir.ErrNonRestoredState)
	require.ErrorContains(t, err, `ID "sum"`)
}
