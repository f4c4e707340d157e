package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/s3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func server(t *testing.T, buckets ...string) *s3test.Server {
	t.Helper()
	srv, err := s3test.Start(buckets...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	return srv
}

func config(srv *s3test.Server, job string) s3.Config {
	return s3.Config{Bucket: "ckpt", Prefix: "root/dir", JobID: job, Endpoint: srv.URL,
		AccessKeyID: s3test.AccessKeyID, SecretAccessKey: s3test.SecretAccessKey,
		PartSize: s3.MinPartSize, ReadAhead: 64 << 10, MaxRetries: -1, RequestTimeout: 5 * time.Second}
}

func open(t *testing.T, cfg s3.Config) *s3.Storage {
	t.Helper()
	st, err := s3.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func write(t *testing.T, f state.StateWriterFactory, id barrier.CheckpointID, name string, data []byte) state.StreamHandle {
	t.Helper()
	w, err := f.CreateStateWriter(id, name)
	require.NoError(t, err)
	_, err = w.Write(data)
	require.NoError(t, err)
	h, err := w.Close()
	require.NoError(t, err)
	return h
}

func read(t *testing.T, st state.StateReader, h state.StreamHandle) []byte {
	t.Helper()
	f, err := st.OpenState(h)
	require.NoError(t, err)
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
	require.NoError(t, err)
	return b
}

var src = state.TaskKey{Vertex: "src"}

func meta(id barrier.CheckpointID, hs ...state.StreamHandle) state.Metadata {
	ops := map[string]state.OperatorSubtaskState{}
	for i, h := range hs {
		ops[string(rune('a'+i))] = state.OperatorSubtaskState{Operator: &state.OperatorStateHandle{StreamHandle: h}}
	}
	return state.Metadata{ID: id, Timestamp: 1, Kind: barrier.Checkpoint, Tasks: map[state.TaskKey]state.TaskSnapshot{src: {Operators: ops}}}
}

// TestRoundTrip: small files go in one PUT, large ones as multipart
// uploads; both read back by ranged GETs; the metadata completes a
// checkpoint and Latest finds it.
func TestRoundTrip(t *testing.T) {
	srv := server(t, "ckpt")
	st := open(t, config(srv, "job-a"))
	small := []byte("hello, object storage")
	large := bytes.Repeat([]byte("0123456789abcdef"), s3.MinPartSize/16+3) // two parts
	parts := srv.Inject(&s3test.Fault{Match: s3test.IsPart})               // counts, fails nothing
	hs := write(t, st, 1, "small", small)
	hl := write(t, st, 1, "large", large)
	require.Equal(t, 2, srv.Hits(parts))
	require.Equal(t, small, read(t, st, hs))
	require.Equal(t, large, read(t, st, hl))

	_, err := st.Latest()
	require.ErrorIs(t, err, state.ErrNotFound, "no metadata: not complete")
	require.NoError(t, st.WriteMetadata(meta(1, hs, hl)))
	m, err := st.Latest()
	require.NoError(t, err)
	require.Equal(t, barrier.CheckpointID(1), m.ID)
	require.Equal(t, "job-a", m.JobID)
	ids, err := st.Checkpoints()
	require.NoError(t, err)
	require.Equal(t, []barrier.CheckpointID{1}, ids)
	require.Equal(t, state.Location{Root: "s3://ckpt/root/dir", JobID: "job-a"}, st.Location())

	// metadata is written once
	require.ErrorContains(t, st.WriteMetadata(meta(1, hs)), "exists already")
}

// TestJobsDoNotSeeEachOther: two jobs on one bucket and prefix.
func TestJobsDoNotSeeEachOther(t *testing.T) {
	srv := server(t, "ckpt")
	a, b := open(t, config(srv, "job-a")), open(t, config(srv, "job-b"))
	h := write(t, a, 3, "f", []byte("a's"))
	require.NoError(t, a.WriteMetadata(meta(3, h)))
	_, err := b.Latest()
	require.ErrorIs(t, err, state.ErrNotFound)
	ids, err := b.Checkpoints()
	require.NoError(t, err)
	require.Empty(t, ids)
	_, err = b.OpenState(h)
	var ce *state.CorruptError
	require.ErrorAs(t, err, &ce, "a's file is not in b's place")
	require.NoError(t, b.Discard(3))
	_, err = a.Latest()
	require.NoError(t, err, "b's discard does not touch a's checkpoint")
}

// TestDiscardSharedFiles: a discard deletes a checkpoint's files and the
// shared files no remaining checkpoint refers to.
func TestDiscardSharedFiles(t *testing.T) {
	srv := server(t, "ckpt")
	st := open(t, config(srv, "job"))
	sw := st.ForOwner(state.FileOwner{Vertex: "src", Operator: "op"}).(state.SharedStateWriterFactory)
	shared := func(id barrier.CheckpointID, name string) state.StreamHandle {
		w, err := sw.CreateSharedStateWriter(id, "pebble-0", name)
		require.NoError(t, err)
		_, err = w.Write([]byte(name))
		require.NoError(t, err)
		h, err := w.Close()
		require.NoError(t, err)
		return h
	}
	m := func(id barrier.CheckpointID, files ...state.StreamHandle) state.Metadata {
		inc := &state.IncrementalHandle{}
		for _, f := range files {
			inc.Shared = append(inc.Shared, state.NamedHandle{Name: f.Path, StreamHandle: f})
		}
		return state.Metadata{ID: id, Timestamp: 1, Kind: barrier.Checkpoint, Tasks: map[state.TaskKey]state.TaskSnapshot{src: {
			Operators: map[string]state.OperatorSubtaskState{"op": {Keyed: &state.KeyedStateHandle{Incremental: inc}}}}}}
	}
	s1, s2 := shared(1, "000001.sst"), shared(1, "000002.sst")
	require.NoError(t, st.WriteMetadata(m(1, s1, s2)))
	s3f := shared(2, "000003.sst")
	orphan := shared(2, "000004.sst") // uploaded for 2, referred to by none
	require.NoError(t, st.WriteMetadata(m(2, s2, s3f)))

	require.NoError(t, st.Discard(1))
	gone := func(h state.StreamHandle) bool {
		err := st.VerifyState(h)
		var ce *state.CorruptError
		return errors.As(err, &ce)
	}
	require.True(t, gone(s1), "only 1 referred to it")
	require.False(t, gone(s2), "2 refers to it")
	require.NoError(t, st.Discard(2))
	require.True(t, gone(s2))
	require.True(t, gone(s3f))
	require.True(t, gone(orphan))
	ids, err := st.Checkpoints()
	require.NoError(t, err)
	require.Empty(t, ids)
	require.NoError(t, st.Discard(7), "missing is no error")
}

// TestFaults: a failed PUT, a failed part, a failing or slow GET and a
// missing object each fail their call cleanly; nothing half-written is
// visible.
func TestFaults(t *testing.T) {
	srv := server(t, "ckpt")
	st := open(t, config(srv, "job"))
	large := bytes.Repeat([]byte{7}, 6<<20)

	t.Run("failed PUT", func(t *testing.T) {
		f := srv.Inject(&s3test.Fault{Match: s3test.And(s3test.IsPut, s3test.KeyContains("chk-1/put")), Status: http.StatusInternalServerError})
		defer srv.Clear()
		w, err := st.CreateStateWriter(1, "put")
		require.NoError(t, err)
		_, err = w.Write([]byte("x"))
		require.NoError(t, err)
		_, err = w.Close()
		require.ErrorContains(t, err, "chk-1/put")
		require.NoError(t, w.Abort())
		require.Equal(t, 1, srv.Hits(f))
	})
	t.Run("failed part", func(t *testing.T) {
		srv.Inject(&s3test.Fault{Match: s3test.IsPart, Status: http.StatusInternalServerError, Times: 1})
		defer srv.Clear()
		w, err := st.CreateStateWriter(2, "big")
		require.NoError(t, err)
		_, err = w.Write(large)
		require.ErrorContains(t, err, "upload part 1")
		_, err = w.Close()
		require.Error(t, err)
		require.NoError(t, w.Abort())
		_, err = st.OpenState(state.StreamHandle{Path: "chk-2/big", Size: int64(len(large))})
		var ce *state.CorruptError
		require.ErrorAs(t, err, &ce, "the aborted upload left no object")
		require.Equal(t, "missing", ce.Reason)
	})
	t.Run("failed metadata PUT", func(t *testing.T) {
		h := write(t, st, 3, "f", []byte("data"))
		srv.Inject(&s3test.Fault{Match: s3test.KeyContains("_metadata"), Status: http.StatusServiceUnavailable, Times: 1})
		defer srv.Clear()
		require.Error(t, st.WriteMetadata(meta(3, h)))
		_, err := st.ReadMetadata(3)
		require.ErrorIs(t, err, state.ErrNotFound, "not visible")
	})
	h := write(t, st, 4, "g", bytes.Repeat([]byte("g"), 200<<10))
	t.Run("failing GET", func(t *testing.T) {
		srv.Inject(&s3test.Fault{Match: s3test.And(s3test.IsGet, s3test.KeyContains("chk-4/g")), Status: http.StatusInternalServerError})
		defer srv.Clear()
		_, err := st.OpenState(h)
		require.ErrorContains(t, err, "chk-4/g")
		var ce *state.CorruptError
		require.False(t, errors.As(err, &ce), "a failed read is not corruption")
	})
	t.Run("slow GET", func(t *testing.T) {
		cfg := config(srv, "job")
		cfg.RequestTimeout = 200 * time.Millisecond
		slow := open(t, cfg)
		srv.Inject(&s3test.Fault{Match: s3test.IsGet, Delay: time.Minute})
		defer srv.Clear()
		_, err := slow.OpenState(h)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("missing object", func(t *testing.T) {
		_, err := st.OpenState(state.StreamHandle{Path: "chk-4/nope"})
		var ce *state.CorruptError
		require.ErrorAs(t, err, &ce)
		require.Contains(t, ce.Path, "s3://ckpt/root/dir/job/chk-4/nope")
	})
	t.Run("truncated object", func(t *testing.T) {
		bad := h
		bad.Size++
		_, err := st.OpenState(bad)
		var ce *state.CorruptError
		require.ErrorAs(t, err, &ce)
	})
	require.Equal(t, h.Size, int64(200<<10))
	require.Equal(t, bytes.Repeat([]byte("g"), 200<<10), read(t, st, h))
}

// TestSavepoint: an export is self-contained and opens by its URL.
func TestSavepoint(t *testing.T) {
	srv := server(t, "ckpt", "savepoints")
	st := open(t, config(srv, "job"))
	h1, h2 := write(t, st, 5, "a", []byte("first")), write(t, st, 5, "b", bytes.Repeat([]byte("z"), 100<<10))
	m := meta(5, h1, h2)
	p, err := st.ExportSavepoint(m, "s3://savepoints/sp")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(p, "s3://savepoints/sp/savepoint-5-"), p)
	require.NoError(t, st.Discard(5))
	got, sp, err := st.OpenSavepoint(p)
	require.NoError(t, err)
	require.Equal(t, barrier.CheckpointID(5), got.ID)
	require.Equal(t, "job", got.JobID)
	hs := got.StreamHandles()
	require.Len(t, hs, 2)
	var all [][]byte
	for _, h := range hs {
		all = append(all, read(t, sp, h))
	}
	require.ElementsMatch(t, [][]byte{[]byte("first"), bytes.Repeat([]byte("z"), 100<<10)}, all)

	_, err = st.ExportSavepoint(m, "/local/dir")
	require.ErrorContains(t, err, "s3:// URL")
	_, _, err = st.OpenSavepoint("s3://savepoints/none")
	require.ErrorIs(t, err, state.ErrNotFound)
}

// TestOpenErrors: what a user can get wrong is named.
func TestOpenErrors(t *testing.T) {
	srv := server(t, "ckpt")
	for _, tc := range []struct {
		name string
		edit func(*s3.Config)
		want string
	}{
		{"missing bucket", func(c *s3.Config) { c.Bucket = "nope" }, `bucket "nope" does not exist`},
		{"wrong credentials", func(c *s3.Config) { c.AccessKeyID = "wrong" }, "credentials were refused"},
		{"bad bucket name", func(c *s3.Config) { c.Bucket = "Bad_Bucket" }, "invalid bucket name"},
		{"bad job", func(c *s3.Config) { c.JobID = "chk-1" }, "invalid job ID"},
		{"bad endpoint", func(c *s3.Config) { c.Endpoint = "ftp://x" }, "scheme must be http or https"},
		{"small parts", func(c *s3.Config) { c.PartSize = 1 << 20 }, "PartSize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(srv, "job")
			tc.edit(&cfg)
			_, err := s3.New(context.Background(), cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	for _, u := range []string{"s3://", "s3:///prefix", "http://bucket/x", "s3://UPPER/x", "s3://b/x?y"} {
		_, _, err := s3.ParseURL(u)
		require.Error(t, err, u)
	}
	b, p, err := s3.ParseURL("s3://my-bucket/a/b/")
	require.NoError(t, err)
	require.Equal(t, "my-bucket", b)
	require.Equal(t, "a/b", p)
}

// TestFromURL takes the endpoint and region from the environment.
func TestFromURL(t *testing.T) {
	srv := server(t, "ckpt")
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	cfg, err := s3.FromURL("s3://ckpt/x", "job")
	require.NoError(t, err)
	require.Equal(t, srv.URL, cfg.Endpoint)
	cfg.MaxRetries = -1
	st := open(t, cfg) // credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
	write(t, st, 1, "f", []byte("x"))
	t.Setenv("AWS_ACCESS_KEY_ID", "someone-else")
	_, err = s3.New(context.Background(), cfg)
	require.ErrorContains(t, err, "credentials were refused")
}
