package parquet_test

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	pq "github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/parquet"
	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/state/s3"
)

// objectStore starts an S3 endpoint with bucket "lake" and points the
// standard environment at it.
func objectStore(t *testing.T) *s3test.Server {
	srv, err := s3test.Start("lake")
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	return srv
}

// readObjects reads every committed part file under prefix of bucket
// lake, and lists the uploads still open there.
func readObjects(t *testing.T, srv *s3test.Server, prefix string) (files []committedFile, open []string) {
	t.Helper()
	keys, err := srv.Keys("lake", prefix)
	require.NoError(t, err)
	for _, k := range keys {
		data, err := srv.Get("lake", k)
		require.NoError(t, err)
		evs, err := pq.Read[event](strings.NewReader(string(data)), int64(len(data)))
		require.NoError(t, err, "committed object %s", k)
		files = append(files, committedFile{rel: strings.TrimPrefix(k, prefix), size: int64(len(data)), events: evs})
	}
	return files, openUploads(t, prefix)
}

// openUploads lists the keys of the uploads open under prefix of bucket
// lake.
func openUploads(t *testing.T, prefix string) (open []string) {
	t.Helper()
	cfg, err := s3.FromURL("s3://lake", "")
	require.NoError(t, err)
	cl, tr, err := cfg.Client()
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	res, err := minio.Core{Client: cl}.ListMultipartUploads(context.Background(), "lake", prefix, "", "", "", 1000)
	if minio.ToErrorResponse(err).Code == minio.NoSuchUpload {
		return nil // gofakes3: the bucket never had an upload
	}
	require.NoError(t, err)
	for _, u := range res.Uploads {
		open = append(open, u.Key)
	}
	return open
}

// The sink on object storage, with task failures at parallelism 2: the
// committed objects hold every event exactly once, in the buckets of
// their hours, and no upload is left open (the failed attempts' are
// aborted); objects appear only with their checkpoint.
func TestObjectStorageExactlyOnceUnderTaskFailures(t *testing.T) {
	const n = 20000
	srv := objectStore(t)
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: t.TempDir()}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(5, 0)))
	var seen, failures atomic.Int64
	src := weir.AssignTimestamps(weir.FromGenerator(env, n, genEvent).WithCodec(eventCodec),
		weir.BoundedOutOfOrderness(time.Second, func(e event) int64 { return e.Time }))
	m := weir.Map(src, func(e event) event {
		if c := seen.Add(1); (c == 6000 || c == 14000) && failures.Add(1) <= 2 {
			panic("injected")
		}
		if seen.Load()%50 == 0 {
			time.Sleep(100 * time.Microsecond) // checkpoints complete while it runs
		}
		return e
	}).WithCodec(eventCodec).Rebalance()
	parquet.Sink(m, parquet.Config[event]{Dir: "s3://lake/out/"})
	res, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, 2, res.Restarts)

	files, open := readObjects(t, srv, "out/")
	require.Empty(t, open, "uploads left open")
	requireExactlyOnce(t, files, n)
	for _, f := range files {
		b := path.Dir(f.rel)
		for _, e := range f.events {
			require.Equal(t, time.UnixMilli(e.Time).UTC().Format("2006-01-02--15"), b, "event %d in %s", e.ID, f.rel)
		}
		require.Regexp(t, `^part-[0-9a-f-]{36}-[01]-\d+\.parquet$`, path.Base(f.rel))
	}
}

// blob is a record of 64 KiB, for part files of several upload parts.
type blob struct {
	ID  int64  `parquet:"id"`
	Pad string `parquet:"pad"`
}

// A part file larger than the minimum part size goes up in several parts
// and commits whole; a canceled job's open part never appears.
func TestObjectStorageLargePartAndCancel(t *testing.T) {
	srv := objectStore(t)
	const n = 200
	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	src := weir.Map(weir.FromGenerator(env, n, func(i int64) int64 { return i }), func(i int64) blob {
		return blob{ID: i, Pad: strings.Repeat(fmt.Sprintf("%08d", i), 8<<10)}
	}).WithCodec(codec.Struct2(codec.Int64(), func(b blob) int64 { return b.ID }, codec.String(), func(b blob) string { return b.Pad },
		func(id int64, pad string) blob { return blob{id, pad} }))
	var parts atomic.Int64
	srv.Inject(&s3test.Fault{Match: func(r *http.Request) bool {
		if s3test.IsPart(r) {
			parts.Add(1)
		}
		return false
	}})
	parquet.Sink(src, parquet.Config[blob]{Dir: "s3://lake/big", Bucket: func(blob, int64) string { return "" }, RowGroupSize: 1 << 20,
		WriterOptions: []pq.WriterOption{pq.Compression(&pq.Uncompressed)}})
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	keys, err := srv.Keys("lake", "big/")
	require.NoError(t, err)
	require.Len(t, keys, 1, "one part file")
	data, err := srv.Get("lake", keys[0])
	require.NoError(t, err)
	blobs, err := pq.Read[blob](strings.NewReader(string(data)), int64(len(data)))
	require.NoError(t, err)
	require.Len(t, blobs, n)
	for i, b := range blobs {
		require.Equal(t, int64(i), b.ID)
		require.Equal(t, strings.Repeat(fmt.Sprintf("%08d", i), 8<<10), b.Pad)
	}
	require.Greater(t, parts.Load(), int64(1), "the part file went up in several parts")
	require.Empty(t, openUploads(t, "big/"))

	env = weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	events := weir.FromGenerator(env, 1<<40, genEvent).WithCodec(eventCodec)
	parquet.Sink(events, parquet.Config[event]{Dir: "s3://lake/canceled"})
	ctx, cancel := context.WithTimeout(testCtx(t), 500*time.Millisecond)
	defer cancel()
	_, err = env.Execute(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	files, open := readObjects(t, srv, "canceled/")
	require.Empty(t, files, "no checkpoint completed, so nothing is committed")
	require.Empty(t, open, "the open part's upload is aborted")
}

// A bucket that does not exist fails Execute naming the sink, before any
// record is read.
func TestObjectStorageNoBucketFailsExecute(t *testing.T) {
	objectStore(t)
	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	var read atomic.Int64
	parquet.Sink(source(env, &read), parquet.Config[event]{Dir: "s3://nosuchbucket/out"})
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "parquet: sink s3://nosuchbucket/out: bucket nosuchbucket does not exist")
	require.Zero(t, read.Load(), "records were read")
}
