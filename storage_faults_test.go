package weir_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/s3"
)

// bigStateJob sums a held source of n records at parallelism 1, each
// record its own key: one keyed state entry per record, so that the sum's
// keyed state file outgrows a multipart upload's part. read counts the
// records the sum saw; release is the held source's.
func bigStateJob(env *weir.Environment, n int64, release func() error) (*weir.Collected[[2]int64], *atomic.Int64) {
	var read atomic.Int64
	src := weir.FromPollingReader(env, "held", func(sub, par int) (weir.PollingReader[[2]int64], error) {
		return &heldReader{i: int64(sub), step: int64(par), n: n, release: release}, nil
	}).WithCodec(pairCodec).UID("held")
	sums := weir.Reduce(weir.KeyBy(src, func(v [2]int64) int64 { return v[1] }, codec.Int64()),
		func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).Name("sum").UID("sum")
	counted := weir.Map(sums, func(v [2]int64) [2]int64 { read.Add(1); return v }).WithCodec(pairCodec).UID("count")
	got, _ := weir.Collect(counted)
	return got, &read
}

// A job whose checkpoints go to a bucket through a server that fails,
// stalls and loses requests: a checkpoint whose multipart upload loses a
// part fails and is never visible (no metadata, Latest does not see it);
// the next one completes; restores whose GETs fail, or stall past the
// request timeout, fail their attempt, slow GETs only slow it down; the
// job finishes with every record counted exactly once.
func TestObjectStorageJobFaults(t *testing.T) {
	const n = 250000 // ~7 MiB of keyed state: a multipart upload of 5 MiB parts
	srv, err := s3test.Start("ckpt")
	require.NoError(t, err)
	defer srv.Close()
	st, err := s3.New(context.Background(), s3.Config{Bucket: "ckpt", Prefix: "jobs", JobID: "big", Endpoint: srv.URL,
		AccessKeyID: s3test.AccessKeyID, SecretAccessKey: s3test.SecretAccessKey,
		PartSize: s3.MinPartSize, MaxRetries: -1, RequestTimeout: time.Second})
	require.NoError(t, err)
	defer st.Close()

	var hold, failSource atomic.Bool
	hold.Store(true)
	release := func() error {
		if failSource.CompareAndSwap(true, false) {
			return errors.New("injected source failure")
		}
		if hold.Load() {
			return nil
		}
		return io.EOF
	}
	env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Storage: st, TolerableFailures: 3}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(10, time.Millisecond)))
	got, read := bigStateJob(env, n, release)
	ctx := testCtx(t)
	job, err := env.Start(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return read.Load() == n }, time.Minute, time.Millisecond)

	// Checkpoint 1: the first part of the big upload fails.
	lost := srv.Inject(&s3test.Fault{Match: s3test.IsPart, Status: http.StatusInternalServerError, Times: 1})
	parts := srv.Inject(&s3test.Fault{Match: s3test.IsPart}) // counts
	_, err = job.TriggerCheckpoint(ctx)
	require.Error(t, err, "a lost part fails the checkpoint")
	require.Equal(t, 1, srv.Hits(lost))
	_, err = st.ReadMetadata(1)
	require.ErrorIs(t, err, state.ErrNotFound, "checkpoint 1 is not visible")
	_, err = st.Latest()
	require.ErrorIs(t, err, state.ErrNotFound)
	keys, err := srv.Keys("ckpt", "jobs/big/chk-1/")
	require.NoError(t, err)
	for _, k := range keys {
		require.False(t, strings.HasSuffix(k, state.MetadataFile), "no metadata of checkpoint 1: %v", keys)
	}

	// Checkpoint 2 completes, in parts.
	id, err := job.TriggerCheckpoint(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, id)
	require.GreaterOrEqual(t, srv.Hits(parts), 2, "the keyed state went up in parts")
	m, err := st.Latest()
	require.NoError(t, err)
	require.EqualValues(t, 2, m.ID)

	// The source fails; the restores from checkpoint 2 meet failing GETs
	// (two attempts), a GET stalled past the request timeout (one), then
	// only slow GETs.
	srv.Clear()
	chk2 := s3test.And(s3test.IsGet, s3test.KeyContains("/chk-2/"))
	failing := srv.Inject(&s3test.Fault{Match: chk2, Status: http.StatusInternalServerError, Times: 2})
	stalled := srv.Inject(&s3test.Fault{Match: chk2, Delay: 3 * time.Second, Times: 1})
	slow := srv.Inject(&s3test.Fault{Match: chk2, Delay: 5 * time.Millisecond})
	hold.Store(false)
	failSource.Store(true)
	res, err := job.Wait()
	require.NoError(t, err)
	require.Equal(t, 2, srv.Hits(failing))
	require.Equal(t, 1, srv.Hits(stalled))
	require.Positive(t, srv.Hits(slow))
	require.GreaterOrEqual(t, res.Restarts, 2, "the failed source and at least one failed restore (one attempt may meet several faults)")
	require.Len(t, got.Values(), n, "every record once")
	seen := map[int64]bool{}
	for _, v := range got.Values() {
		seen[v[1]] = true
	}
	require.Len(t, seen, n, "no record twice")
}

// Restores from a checkpoint whose objects are missing or corrupt fail
// with an error that names the object; restoring from the job's place
// skips a newest checkpoint whose state is missing for the one before.
func TestObjectStorageRestoreNamesMissingOrCorruptObjects(t *testing.T) {
	const n, at = 40000, 10000
	srv, err := s3test.Start("ckpt")
	require.NoError(t, err)
	defer srv.Close()
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: "s3://ckpt/jobs", RetainOnCancel: true, Retained: 3}
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithCheckpointing(ckpt), weir.WithJobID("sums"))
	reached := make(chan struct{})
	throttledSumJob(env, n, at, reached)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	<-reached
	for range 3 {
		_, err = job.TriggerCheckpoint(testCtx(t))
		require.NoError(t, err)
	}
	job.Cancel()
	_, _ = job.Wait()

	restore := func(from string) error {
		env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}), weir.WithRestoreFrom(from))
		throttledSumJob(env, n, at, nil)
		_, err := env.Execute(testCtx(t))
		return err
	}
	const place = "s3://ckpt/jobs/sums"
	// Checkpoint 1: its metadata is missing.
	require.NoError(t, srv.Delete("ckpt", "jobs/sums/chk-1/"+state.MetadataFile))
	err = restore(place + "/chk-1")
	require.ErrorIs(t, err, state.ErrNotFound)
	require.ErrorContains(t, err, place+"/chk-1")
	// Checkpoint 2: its metadata is corrupt.
	meta := "jobs/sums/chk-2/" + state.MetadataFile
	b, err := srv.Get("ckpt", meta)
	require.NoError(t, err)
	b[len(b)/2] ^= 0xff
	require.NoError(t, srv.Put("ckpt", meta, b))
	err = restore(place + "/chk-2")
	var ce *state.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "s3://ckpt/"+meta, ce.Path, "the object is named")
	// Checkpoint 3: a state object is missing.
	keys, err := srv.Keys("ckpt", "jobs/sums/chk-3/")
	require.NoError(t, err)
	var gone string
	for _, k := range keys {
		if !strings.HasSuffix(k, state.MetadataFile) {
			gone = k
			break
		}
	}
	require.NotEmpty(t, gone)
	require.NoError(t, srv.Delete("ckpt", gone))
	err = restore(place + "/chk-3")
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "s3://ckpt/"+gone, ce.Path, "the object is named")
	// The place: no checkpoint is valid, and the error says where.
	err = restore(place)
	require.ErrorIs(t, err, state.ErrNotFound)
	require.ErrorContains(t, err, place)
}
