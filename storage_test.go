package weir_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/state"
)

// storageCase is checkpoint storage a test runs on: a directory, or a
// bucket of an S3 server in the process (gofakes3 over HTTP), which the
// environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...) points at.
type storageCase struct {
	name string
	// root returns a fresh checkpoint root; savepoints a savepoint
	// target.
	root, savepoints func(t *testing.T) string
	// corrupt flips a byte of one state file of the savepoint at sp.
	corrupt func(t *testing.T, sp string)
}

// storages is the table of storages the checkpoint tests run on.
func storages() []storageCase {
	var srv *s3test.Server
	s3srv := func(t *testing.T) *s3test.Server {
		if srv == nil {
			var err error
			srv, err = s3test.Start("ckpt", "savepoints")
			require.NoError(t, err)
			s := srv
			t.Cleanup(func() {
				require.NoError(t, s.Close())
				srv = nil
			})
			for k, v := range s.Env() {
				t.Setenv(k, v)
			}
		}
		return srv
	}
	return []storageCase{
		{name: "file",
			root:       func(t *testing.T) string { return t.TempDir() },
			savepoints: func(t *testing.T) string { return t.TempDir() },
			corrupt: func(t *testing.T, sp string) {
				entries, err := os.ReadDir(sp)
				require.NoError(t, err)
				for _, e := range entries {
					f := filepath.Join(sp, e.Name())
					if b, err := os.ReadFile(f); err == nil && e.Name() != state.MetadataFile && len(b) > 0 {
						b[len(b)/2] ^= 0xff
						require.NoError(t, os.WriteFile(f, b, 0o644))
						return
					}
				}
				t.Fatal("no state file to corrupt")
			}},
		{name: "s3",
			root:       func(t *testing.T) string { s3srv(t); return "s3://ckpt/" + strings.ReplaceAll(t.Name(), "/", "-") },
			savepoints: func(t *testing.T) string { s3srv(t); return "s3://savepoints/sp" },
			corrupt: func(t *testing.T, sp string) {
				s := s3srv(t)
				prefix := strings.TrimPrefix(sp, "s3://savepoints/") + "/"
				keys, err := s.Keys("savepoints", prefix)
				require.NoError(t, err)
				for _, k := range keys {
					if b, err := s.Get("savepoints", k); err == nil && !strings.HasSuffix(k, state.MetadataFile) && len(b) > 0 {
						b[len(b)/2] ^= 0xff
						require.NoError(t, s.Put("savepoints", k, b))
						return
					}
				}
				t.Fatal("no state object to corrupt")
			}},
	}
}

// A savepoint of a running job at parallelism 2 on each storage, the job
// canceled, a job at parallelism 3 started from it: together they count
// every record exactly once (keyed state moved by key group). A corrupt
// state file of the savepoint fails the restore, naming the file.
func TestStoragesSavepointRescaleAndCorruption(t *testing.T) {
	const n, at = 60000, 20000
	for _, sc := range storages() {
		t.Run(sc.name, func(t *testing.T) {
			ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: sc.root(t)}
			env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithCheckpointing(ckpt))
			reached := make(chan struct{})
			throttledSumJob(env, n, at, reached)
			job, err := env.Start(testCtx(t))
			require.NoError(t, err)
			<-reached
			sp, err := job.TriggerSavepoint(testCtx(t), sc.savepoints(t))
			require.NoError(t, err)
			job.Cancel()
			_, _ = job.Wait()

			env2 := weir.NewEnvironment(weir.WithParallelism(3), weir.WithCheckpointing(ckpt),
				weir.WithRestoreFrom(sp), weir.WithBufferTimeout(time.Millisecond))
			got := throttledSumJob(env2, n, at, nil)
			_, err = env2.Execute(testCtx(t))
			require.NoError(t, err)
			require.Equal(t, wantSums(n), finalSums(got.Values()))
			require.Len(t, got.Values(), n, "one output per input")

			sc.corrupt(t, sp)
			env3 := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(ckpt), weir.WithRestoreFrom(sp))
			throttledSumJob(env3, n, at, nil)
			_, err = env3.Execute(testCtx(t))
			var ce *state.CorruptError
			require.ErrorAs(t, err, &ce)
			require.Contains(t, err.Error(), "restore from "+sp)
			require.True(t, strings.HasPrefix(ce.Path, sp) || !strings.HasPrefix(sp, "s3://"), "the object is named: %s", ce.Path)
		})
	}
}

// A retained checkpoint of a canceled job on each storage resumes in a new
// job restored from the checkpoint root, which continues the checkpoint
// IDs in the same place.
func TestStoragesResumeFromRetainedCheckpoint(t *testing.T) {
	const n, at = 60000, 20000
	for _, sc := range storages() {
		t.Run(sc.name, func(t *testing.T) {
			root := sc.root(t)
			ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: root, RetainOnCancel: true}
			env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(ckpt), weir.WithBufferTimeout(time.Millisecond), weir.WithJobID("sums"))
			reached := make(chan struct{})
			throttledSumJob(env, n, at, reached)
			job, err := env.Start(testCtx(t))
			require.NoError(t, err)
			<-reached
			id, err := job.TriggerCheckpoint(testCtx(t))
			require.NoError(t, err)
			job.Cancel()
			_, _ = job.Wait()

			env2 := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(ckpt),
				weir.WithRestoreFrom(root+"/sums"), weir.WithBufferTimeout(time.Millisecond))
			got := throttledSumJob(env2, n, at, nil)
			job2, err := env2.Start(testCtx(t))
			require.NoError(t, err)
			id2, err := job2.TriggerCheckpoint(testCtx(t))
			if err == nil { // the job may already have finished
				require.Greater(t, id2, id, "checkpoint IDs continue after the restored one")
			}
			_, err = job2.Wait()
			require.NoError(t, err)
			require.Equal(t, wantSums(n), finalSums(got.Values()))
			require.Len(t, got.Values(), n)
		})
	}
}

// Workers keep keyed state in pebble with incremental checkpoints whose
// shared files go to each storage (the workers open it from the location
// the coordinator sends); a task fails once and the job restores: the
// committed output counts every record once.
func TestStoragesClusterPebbleIncremental(t *testing.T) {
	const n = 40000
	for _, sc := range storages() {
		t.Run(sc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			var seen atomic.Int64
			hook := func() {
				if seen.Add(1) == 15000 {
					panic("injected task failure")
				}
			}
			sb := weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20, Incremental: true}))
			res, err := runClusterCkpt(t, weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: sc.root(t)}, weir.ClusterConfig{}, weir.WorkerConfig{},
				func(env *weir.Environment) { buildClusterJob(env, n, out, hook) }, nil, sb)
			require.NoError(t, err)
			require.Equal(t, 1, res.Restarts)
			require.Positive(t, res.Checkpoints.Completed)
			final, lines := readSums(t, out)
			require.Equal(t, wantSums(n), final)
			require.Equal(t, n, lines, "exactly once")
		})
	}
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
