package nats_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	weirnats "github.com/weirstream/weir/connectors/nats"
)

// NATS -> keyed state -> NATS, exactly once, with task kills: the stream
// written holds exactly the batch answer, at every parallelism.
func TestExactlyOnceEndToEnd(t *testing.T) {
	for _, p := range []int{1, 3} {
		t.Run(fmt.Sprintf("p%d", p), func(t *testing.T) {
			s := server(t)
			clicksStreams(t, s.URL())
			in := clicks(6000, 7)
			publish(t, s.URL(), clickSubject, in, nil)
			env := checkpointed(p)
			k := &killer{at: []int64{1000, 3000, 5000}}
			countingJob(env, s.URL(), k, weirnats.ExactlyOnce)
			j, err := env.Start(testCtx(t))
			require.NoError(t, err)
			k.job.Store(j)
			res, err := j.Wait()
			require.NoError(t, err)
			require.Equal(t, 3, k.done(), "every injected failure fired")
			got := readStream(t, s.URL(), "counts")
			slices.Sort(got)
			requireSame(t, runningCounts(in), got)
			t.Logf("restarts %d, checkpoints %d completed", res.Restarts, res.Checkpoints.Completed)
		})
	}
}

// At least once with kills: every result is there, some maybe twice.
func TestAtLeastOnceLosesNothing(t *testing.T) {
	s := server(t)
	clicksStreams(t, s.URL())
	in := clicks(4000, 5)
	publish(t, s.URL(), clickSubject, in, nil)
	env := checkpointed(2)
	k := &killer{at: []int64{1000, 2500}}
	countingJob(env, s.URL(), k, weirnats.AtLeastOnce)
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.job.Store(j)
	_, err = j.Wait()
	require.NoError(t, err)
	got := readStream(t, s.URL(), "counts")
	have := map[string]bool{}
	for _, g := range got {
		have[g] = true
	}
	for _, w := range runningCounts(in) {
		require.True(t, have[w], "missing %s", w)
	}
	t.Logf("%d records for %d results", len(got), len(in))
}
