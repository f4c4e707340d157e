package upgradetest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/state"
)

// finishedJob: a short source "a" (50 values, one subtask) and a long one
// "b" (throttled), united, through a map "m", into an exactly-once file
// sink. v1's "a" finishes long before "b". inserted adds a stateless map
// after the union; par is the job's parallelism (the sources keep one
// subtask); chained, v2 chains "m" behind "a" alone (the union then
// takes m's output and b).
type finishedJob struct {
	inserted bool
	par      int
	chained  bool
}

const finishedA, finishedB = 50, 20000

func (f finishedJob) version() version {
	par := f.par
	if par == 0 {
		par = 2
	}
	return version{opts: []weir.Option{weir.WithParallelism(par)}, build: func(env *weir.Environment, out string, th *throttle) {
		as := make([]string, finishedA)
		for i := range as {
			as[i] = fmt.Sprintf("a-%d", i)
		}
		a := weir.FromSlice(env, as).Parallelism(1).UID("a")
		b := throttled(weir.FromGenerator(env, finishedB, func(i int64) string { return fmt.Sprintf("b-%d", i) }).Parallelism(1).UID("b"), th)
		var s *weir.Stream[string]
		if f.chained {
			s = weir.Union(weir.Map(a, func(v string) string { return v }).Parallelism(1).UID("m"), b)
		} else {
			s = weir.Map(weir.Union(a, b), func(v string) string { return v }).Parallelism(1).UID("m")
		}
		if f.inserted {
			s = weir.Map(s, func(v string) string { return v })
		}
		weir.FileSink(s, out, func(v string) []byte { return []byte(v) }).UID("sink")
	}}
}

// aFinished waits until a savepoint of job records source "a" as finished
// (so that the coordinator knows: the savepoint that stops the job then
// records it too).
func aFinished(t *testing.T, dir string) func(context.Context, *weir.Job) bool {
	return func(ctx context.Context, job *weir.Job) bool {
		for i := 0; ctx.Err() == nil; i++ {
			sp, err := job.TriggerSavepoint(ctx, filepath.Join(dir, fmt.Sprintf("probe-%d", i)))
			if err == nil {
				m, _, err := state.OpenSavepoint(sp, nil)
				require.NoError(t, err)
				for _, ts := range m.Tasks {
					if a, ok := ts.Operators["a"]; ok && a.Finished {
						return true
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
}

// A savepoint taken after one source finished restores into changed code:
// an operator inserted, the job rescaled; the finished source does not
// read again, and both versions together write every value once. Chaining
// the running map behind the finished source is refused with
// weir.ErrFinishedMixed, naming both.
func TestFinishedSourceThroughUpgrades(t *testing.T) {
	var want []string
	for i := range finishedA {
		want = append(want, fmt.Sprintf("a-%d", i))
	}
	for i := range finishedB {
		want = append(want, fmt.Sprintf("b-%d", i))
	}
	slices.Sort(want)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			v1 := finishedJob{}.version()
			ckpt := time.Hour
			if m.stop {
				ckpt = 20 * time.Millisecond
			}
			env := weir.NewEnvironment(v1.options(ckpt)...)
			v1.build(env, out, &throttle{at: 1, reached: make(chan struct{})})
			sp := stopAtSavepoint(t, env, m.stop, aFinished(t, dir), dir, out)

			for _, v2 := range []finishedJob{{}, {inserted: true}, {par: 3}, {inserted: true, par: 1}} {
				t.Run(fmt.Sprintf("%+v", v2), func(t *testing.T) {
					got, _, err := sp.restoreOf(t, v2.version())
					require.NoError(t, err)
					requireLines(t, want, got)
				})
			}
			t.Run("m chained behind the finished source", func(t *testing.T) {
				_, _, err := sp.restoreOf(t, finishedJob{chained: true}.version())
				require.ErrorIs(t, err, weir.ErrFinishedMixed)
				require.ErrorContains(t, err, `operator slice source (ID "a") had finished in subtask 0 and operator map (ID "m") had not`)
			})
		})
	}
}
