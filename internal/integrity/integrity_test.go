// Package integrity_test measures what a restore makes of a damaged
// checkpoint: seeded random corruptions of the newest retained checkpoint
// of a keyed-sum job, each restored through the public API, must either
// restore exactly or fail with an error naming the damaged file — never
// restore a wrong answer. It also runs two jobs on one checkpoint
// directory. It is a package of its own so that it runs beside the root
// package's tests.
package integrity_test

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	trials = flag.Int("integrity.trials", 24, "corruption trials of TestCorruptionNeverRestoresWrongly (the issue measured 200)")
	seed   = flag.Uint64("integrity.seed", 0, "seed of the corruption trials (0: random, printed)")
)

const (
	records = 20000
	keys    = 37
	jobID   = "sum"
)

// gatedReader emits the records i ≡ subtask (mod parallelism) below the
// gate, then waits for the gate to move; at n it ends. Its position is
// the next i.
type gatedReader struct {
	i, step, n int64
	gate       *atomic.Int64
}

func (r *gatedReader) Poll() ([2]int64, weir.ReadStatus, error) {
	if r.i >= r.n {
		return [2]int64{}, weir.EndOfInput, nil
	}
	if r.i >= r.gate.Load() {
		return [2]int64{}, weir.NothingAvailable, nil
	}
	v := [2]int64{r.i % keys, 1}
	r.i += r.step
	return v, weir.Read, nil
}

func (r *gatedReader) Available() <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(time.Millisecond, func() { close(ch) })
	return ch
}

func (r *gatedReader) Position() ([]byte, error) { return binary.AppendVarint(nil, r.i), nil }

func (r *gatedReader) Seek(pos []byte) error {
	v, n := binary.Varint(pos)
	if n <= 0 {
		return errors.New("bad position")
	}
	r.i = v
	return nil
}

var pairCodec = codec.Func(
	func(dst []byte, v [2]int64) []byte {
		return codec.Int64().Append(codec.Int64().Append(dst, v[0]), v[1])
	},
	func(src []byte) ([2]int64, error) {
		if len(src) != 16 {
			return [2]int64{}, errors.New("pair: need 16 bytes")
		}
		a, _ := codec.Int64().Decode(src[:8])
		b, _ := codec.Int64().Decode(src[8:])
		return [2]int64{a, b}, nil
	})

// sumJob builds the keyed-sum job: a gated source of records (key, 1), a
// count of what passed, a running sum per key, collected.
func sumJob(env *weir.Environment, gate *atomic.Int64, seen *atomic.Int64) *weir.Collected[[2]int64] {
	src := weir.FromPollingReader(env, "source", func(sub, par int) (weir.PollingReader[[2]int64], error) {
		return &gatedReader{i: int64(sub), step: int64(par), n: records, gate: gate}, nil
	}).WithCodec(pairCodec).UID("source")
	counted := weir.Map(src, func(v [2]int64) [2]int64 { seen.Add(1); return v }).WithCodec(pairCodec).UID("count")
	sums := weir.Reduce(weir.KeyBy(counted, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).UID("sum")
	got, _ := weir.Collect(sums)
	return got
}

func ckptConfig(dir string) weir.CheckpointConfig {
	return weir.CheckpointConfig{Interval: time.Hour, Dir: dir, Retained: 3, RetainOnCancel: true}
}

// prepare runs the job to three quarters of its input, taking a checkpoint
// at each quarter, and cancels it: dir/sum holds chk-1 to chk-3.
func prepare(t *testing.T, dir string) {
	var gate, seen atomic.Int64
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(ckptConfig(dir)), weir.WithJobID(jobID))
	sumJob(env, &gate, &seen)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	job, err := env.Start(ctx)
	require.NoError(t, err)
	for q := int64(1); q <= 3; q++ {
		gate.Store(q * records / 4)
		require.Eventually(t, func() bool { return seen.Load() == q*records/4 }, time.Minute, time.Millisecond)
		_, err := job.TriggerCheckpoint(ctx)
		require.NoError(t, err)
	}
	job.Cancel()
	_, err = job.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

// restore runs the job from restoreFrom to the end of its input and
// returns its final sum per key.
func restore(ctx context.Context, dir, restoreFrom string) (map[int64]int64, error) {
	var gate, seen atomic.Int64
	gate.Store(records)
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(ckptConfig(dir)), weir.WithRestoreFrom(restoreFrom))
	got := sumJob(env, &gate, &seen)
	if _, err := env.Execute(ctx); err != nil {
		return nil, err
	}
	final := map[int64]int64{}
	for _, v := range got.Values() {
		final[v[0]] = max(final[v[0]], v[1])
	}
	return final, nil
}

func wantSums() map[int64]int64 {
	want := map[int64]int64{}
	for i := range int64(records) {
		want[i%keys]++
	}
	return want
}

func copyTree(t *testing.T, src, dst string) {
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
}

// corruption damages one file of a checkpoint directory.
type corruption struct {
	kind string
	file string // base name in chk-3
	desc string
}

var kinds = []string{"bitflip", "truncate", "zero", "delete", "tail", "older"}

// apply damages chk in place (older files come from the chk-1 and chk-2
// beside it) and says what it did.
func apply(t *testing.T, rng *rand.Rand, chk string, kind string) corruption {
	names, err := os.ReadDir(chk)
	require.NoError(t, err)
	var files []string
	for _, e := range names {
		if !strings.HasPrefix(e.Name(), ".") {
			files = append(files, e.Name())
		}
	}
	sort.Strings(files)
	name := files[rng.IntN(len(files))]
	p := filepath.Join(chk, name)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	c := corruption{kind: kind, file: name}
	switch kind {
	case "bitflip":
		i := rng.IntN(len(b))
		b[i] ^= 1 << rng.IntN(8)
		c.desc = fmt.Sprintf("bit flip at %d", i)
	case "truncate":
		n := rng.IntN(len(b))
		b = b[:n]
		c.desc = fmt.Sprintf("truncated to %d of %d", n, len(b))
	case "zero":
		i := rng.IntN(len(b))
		n := 1 + rng.IntN(min(64, len(b)-i))
		clear(b[i : i+n])
		c.desc = fmt.Sprintf("zeroed [%d,%d)", i, i+n)
	case "delete":
		require.NoError(t, os.Remove(p))
		c.desc = "deleted"
		return c
	case "tail":
		tail := make([]byte, 1+rng.IntN(32))
		for i := range tail {
			tail[i] = byte(rng.Uint32())
		}
		b = append(b, tail...)
		c.desc = fmt.Sprintf("%d garbage bytes appended", len(tail))
	case "older":
		older := fmt.Sprintf("chk-%d", 1+rng.IntN(2))
		ob, err := os.ReadFile(filepath.Join(filepath.Dir(chk), older, name))
		require.NoError(t, err)
		b = ob
		c.desc = "replaced by " + older + "'s"
	}
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return c
}

// TestCorruptionNeverRestoresWrongly: each trial damages the newest
// retained checkpoint (chk-3) of a copy of the keyed-sum job's checkpoints
// and restores, from the checkpoint directory (which must skip to chk-2
// and restore exactly) or from chk-3 (which must restore exactly, if the
// damage left it intact in what it means, or fail naming the file).
func TestCorruptionNeverRestoresWrongly(t *testing.T) {
	pristine := t.TempDir()
	prepare(t, pristine)
	s := *seed
	if s == 0 {
		s = rand.Uint64()
	}
	t.Logf("seed %d (-integrity.seed to repeat), %d trials", s, *trials)
	want := wantSums()
	var restored, refused atomic.Int64
	t.Run("trials", func(t *testing.T) {
		for i := range *trials {
			rng := rand.New(rand.NewPCG(s, uint64(i)))
			kind := kinds[i%len(kinds)]
			fromDir := rng.IntN(2) == 0
			t.Run(fmt.Sprintf("%d-%s", i, kind), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				copyTree(t, pristine, dir)
				chk := filepath.Join(dir, jobID, "chk-3")
				c := apply(t, rng, chk, kind)
				from := chk
				if fromDir {
					from = dir
				}
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				got, err := restore(ctx, dir, from)
				if err == nil {
					require.Equal(t, want, got, "%s %s (%s), restored from %s: a wrong answer", c.kind, c.file, c.desc, from)
					restored.Add(1)
					return
				}
				require.False(t, fromDir, "%s %s (%s): a directory restore must fall back to chk-2: %v", c.kind, c.file, c.desc, err)
				require.ErrorContains(t, err, c.file, "%s (%s): the error names the file", c.kind, c.desc)
				if c.kind != "delete" || c.file != state.MetadataFile {
					var ce *state.CorruptError
					require.ErrorAs(t, err, &ce, "%s %s (%s)", c.kind, c.file, c.desc)
				}
				refused.Add(1)
			})
		}
	})
	t.Logf("%d trials: %d restored exactly, %d refused naming the file", *trials, restored.Load(), refused.Load())
}

// Two jobs on one checkpoint directory at once keep their checkpoints
// apart; a restore from the directory then names both; a second job with
// the same job ID is refused while the first runs.
func TestTwoJobsOnOneDirectory(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := func(opts ...weir.Option) (*weir.Job, *atomic.Int64, *atomic.Int64) {
		var gate, seen atomic.Int64
		env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
			weir.WithCheckpointing(ckptConfig(dir))}, opts...)...)
		sumJob(env, &gate, &seen)
		job, err := env.Start(ctx)
		require.NoError(t, err)
		return job, &gate, &seen
	}
	a, gateA, seenA := start()
	b, gateB, seenB := start()
	for _, j := range []struct {
		job        *weir.Job
		gate, seen *atomic.Int64
	}{{a, gateA, seenA}, {b, gateB, seenB}} {
		j.gate.Store(records / 2)
		require.Eventually(t, func() bool { return j.seen.Load() == records/2 }, time.Minute, time.Millisecond)
		_, err := j.job.TriggerCheckpoint(ctx)
		require.NoError(t, err)
	}
	places, err := state.FindPlaces(state.OSFS{}, dir)
	require.NoError(t, err)
	require.Len(t, places, 2, "each job has a place of its own")

	_, err = restore(ctx, t.TempDir(), dir)
	var several *state.SeveralJobsError
	require.ErrorAs(t, err, &several)
	for _, p := range places {
		require.ErrorContains(t, err, filepath.Join(dir, p.JobID))
	}

	// Each job's own place restores that job exactly.
	for _, j := range []*weir.Job{a, b} {
		j.Cancel()
		_, err := j.Wait()
		require.ErrorIs(t, err, context.Canceled)
	}
	for _, p := range places {
		got, err := restore(ctx, dir, filepath.Join(dir, p.JobID))
		require.NoError(t, err)
		require.Equal(t, wantSums(), got)
	}

	// One job ID, two running jobs: the second is refused.
	c, _, _ := start(weir.WithJobID("same"))
	var gate, seen atomic.Int64
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(ckptConfig(dir)), weir.WithJobID("same"))
	sumJob(env, &gate, &seen)
	_, err = env.Execute(ctx)
	require.ErrorIs(t, err, state.ErrLocked)
	require.ErrorContains(t, err, filepath.Join(dir, "same", state.LockFile))
	c.Cancel()
	_, err = c.Wait()
	require.ErrorIs(t, err, context.Canceled)
}
