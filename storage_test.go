package weir_test

import (
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/internal/storagetest"
	"github.com/weirstream/weir/state"
)

// Workers keep keyed state in pebble with incremental checkpoints whose
// shared files go to each storage (the workers open it from the location
// the coordinator sends); a task fails once and the job restores: the
// committed output counts every record once.
func TestStoragesClusterPebbleIncremental(t *testing.T) {
	const n = 40000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		out := filepath.Join(t.TempDir(), "out")
		var seen atomic.Int64
		hook := func() {
			if seen.Add(1) == 15000 {
				panic("injected task failure")
			}
		}
		var shared *s3test.Fault // counts the shared files' uploads
		if s.S3() {
			shared = s.Server.Inject(&s3test.Fault{Match: s3test.And(s3test.KeyContains("/shared/"),
				func(r *http.Request) bool { return r.Method == http.MethodPut })})
		}
		sb := weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20, Incremental: true}))
		res, err := runClusterCkpt(t, weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: s.Root()}, weir.ClusterConfig{}, weir.WorkerConfig{},
			func(env *weir.Environment) { buildClusterJob(env, n, out, hook) }, nil, sb)
		require.NoError(t, err)
		require.Equal(t, 1, res.Restarts)
		require.Positive(t, res.Checkpoints.Completed)
		final, lines := readSums(t, out)
		require.Equal(t, wantSums(n), final)
		require.Equal(t, n, lines, "exactly once")
		if s.S3() {
			require.Positive(t, s.Server.Hits(shared), "the workers uploaded shared files to the bucket")
		}
	})
}

// What a user can get wrong about object storage fails Execute with an
// error naming it.
func TestObjectStorageConfigErrors(t *testing.T) {
	srv, err := s3test.Start("ckpt")
	require.NoError(t, err)
	defer srv.Close()
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	run := func(dir string) error {
		env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Dir: dir}))
		throttledSumJob(env, 10, 1, nil)
		_, err := env.Execute(testCtx(t))
		return err
	}
	require.ErrorContains(t, run("s3://"), `invalid URL "s3://": no bucket`)
	require.ErrorContains(t, run("s3://Bad_Bucket/x"), "invalid bucket name")
	require.ErrorContains(t, run("s3://missing/x"), `bucket "missing" does not exist`)
	require.ErrorContains(t, run("gs://bucket/x"), "unknown scheme")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	t.Setenv("AWS_ACCESS_KEY_ID", "nobody")
	require.ErrorContains(t, run("s3://ckpt/x"), "credentials were refused")
}

// A state file's upload fails for checkpoint 2 (every retry): that
// checkpoint fails, its metadata is never written, later checkpoints
// complete, and the job's output is exact.
func TestObjectStorageFailedUploadFailsOnlyItsCheckpoint(t *testing.T) {
	const n, at = 10000, 3000
	srv, err := s3test.Start("ckpt")
	require.NoError(t, err)
	defer srv.Close()
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	chk2 := s3test.KeyContains("/chk-2/")
	meta2 := srv.Inject(&s3test.Fault{Match: s3test.And(chk2, s3test.IsPut, s3test.KeyContains(state.MetadataFile))}) // counts
	fail := srv.Inject(&s3test.Fault{Match: s3test.And(chk2, s3test.IsPut), Status: 500})
	ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: "s3://ckpt/jobs", TolerableFailures: 3}
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithCheckpointing(ckpt))
	reached := make(chan struct{})
	got := throttledSumJob(env, n, at, reached)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	<-reached
	_, err = job.TriggerCheckpoint(testCtx(t))
	require.NoError(t, err)
	_, err = job.TriggerCheckpoint(testCtx(t))
	require.Error(t, err, "checkpoint 2's upload failed")
	id, err := job.TriggerCheckpoint(testCtx(t))
	if err == nil { // the job may already have finished
		require.Equal(t, 3, int(id))
	}
	_, err = job.Wait()
	require.NoError(t, err)
	require.Positive(t, srv.Hits(fail))
	require.Zero(t, srv.Hits(meta2), "no metadata for a checkpoint with a failed file")
	require.Equal(t, wantSums(n), finalSums(got.Values()))
	require.Len(t, got.Values(), n)
}
