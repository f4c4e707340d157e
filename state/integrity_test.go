package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// jobStorage is the storage of job on a shared in-memory root.
func jobStorage(t testing.TB, fsys state.FS, job string) (*state.FileStorage, *observer.ObservedLogs) {
	core, logs := observer.New(zap.ErrorLevel)
	s, err := state.NewFileStorage(state.FileStorageConfig{Dir: "/root", JobID: job, FS: fsys, Logger: zap.New(core)})
	require.NoError(t, err)
	return s, logs
}

func readFile(t testing.TB, fsys state.FS, name string) []byte {
	f, err := fsys.Open(name)
	require.NoError(t, err)
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return b
}

func replaceFile(t testing.TB, fsys *state.MemFS, name string, data []byte) {
	require.NoError(t, fsys.Corrupt(name, func([]byte) []byte { return bytes.Clone(data) }))
}

var checkpointFiles = []string{state.MetadataFile, "src-0-op1-keyed", "src-0-op1-operator"}

// Checkpoints of the same keys with other values have other checksums:
// the checksum depends on the content, not only on section lengths (a
// CRC32C over sections that end in their own CRC32C is a constant).
func TestChecksumDependsOnContent(t *testing.T) {
	fsys := state.NewMemFS()
	s, _ := jobStorage(t, fsys, "j1")
	m1, err := writeCheckpoint(t, s, 1, 100)
	require.NoError(t, err)
	m2, err := writeCheckpoint(t, s, 2, 200)
	require.NoError(t, err)
	k1 := m1.Tasks[state.TaskKey{Vertex: "src"}].Operators["op1"].Keyed
	k2 := m2.Tasks[state.TaskKey{Vertex: "src"}].Operators["op1"].Keyed
	require.Equal(t, k1.Size, k2.Size, "same layout")
	require.NotEqual(t, k1.Checksum, k2.Checksum)
}

// A state file replaced by the same-named file of an older checkpoint is
// refused, naming the file and what it belongs to; Latest falls back.
func TestStaleStateFileRefused(t *testing.T) {
	for _, file := range checkpointFiles[1:] {
		t.Run(file, func(t *testing.T) {
			fsys := state.NewMemFS()
			s, logs := jobStorage(t, fsys, "j1")
			for id := barrier.CheckpointID(1); id <= 3; id++ {
				_, err := writeCheckpoint(t, s, id, 100*int64(id))
				require.NoError(t, err)
			}
			replaceFile(t, fsys, "/root/j1/chk-3/"+file, readFile(t, fsys, "/root/j1/chk-2/"+file))
			m3, err := s.ReadMetadata(3)
			require.NoError(t, err)
			err = s.Verify(m3)
			var ce *state.CorruptError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "chk-3/"+file, ce.Path)
			require.Contains(t, ce.Reason, "belongs to checkpoint 2 of job j1")
			m, err := s.Latest()
			require.NoError(t, err)
			require.EqualValues(t, 2, m.ID)
			require.Equal(t, "j1", m.JobID)
			require.Equal(t, 1, logs.Len())
			require.EqualValues(t, 3, logs.All()[0].ContextMap()["checkpoint"])
			require.Equal(t, int64(203), restoreValue(t, s, m))
		})
	}
}

// _metadata replaced by an older checkpoint's is refused: its ID is not
// its directory's.
func TestStaleMetadataRefused(t *testing.T) {
	fsys := state.NewMemFS()
	s, logs := jobStorage(t, fsys, "j1")
	for id := barrier.CheckpointID(1); id <= 3; id++ {
		_, err := writeCheckpoint(t, s, id, 100*int64(id))
		require.NoError(t, err)
	}
	replaceFile(t, fsys, "/root/j1/chk-3/_metadata", readFile(t, fsys, "/root/j1/chk-1/_metadata"))
	_, err := s.ReadMetadata(3)
	var ce *state.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "chk-3/_metadata", ce.Path)
	require.Contains(t, ce.Reason, "metadata of checkpoint 1, not of checkpoint 3")
	m, err := s.Latest()
	require.NoError(t, err)
	require.EqualValues(t, 2, m.ID, "the newest valid checkpoint")
	require.Equal(t, 1, logs.Len())
}

// Two jobs on one root have places of their own; a file or metadata of one
// copied into the other's is refused.
func TestOtherJobsFilesRefused(t *testing.T) {
	fsys := state.NewMemFS()
	s1, _ := jobStorage(t, fsys, "j1")
	s2, _ := jobStorage(t, fsys, "j2")
	_, err := writeCheckpoint(t, s1, 1, 100)
	require.NoError(t, err)
	_, err = writeCheckpoint(t, s2, 1, 100) // same content, other job
	require.NoError(t, err)
	require.Equal(t, "/root/j1", s1.Dir())

	replaceFile(t, fsys, "/root/j1/chk-1/src-0-op1-keyed", readFile(t, fsys, "/root/j2/chk-1/src-0-op1-keyed"))
	m, err := s1.ReadMetadata(1)
	require.NoError(t, err)
	require.ErrorContains(t, s1.Verify(m), "belongs to checkpoint 1 of job j2")

	replaceFile(t, fsys, "/root/j1/chk-1/_metadata", readFile(t, fsys, "/root/j2/chk-1/_metadata"))
	_, err = s1.ReadMetadata(1)
	require.ErrorContains(t, err, `metadata of job "j2", not of job "j1"`)

	// Discarding j1's checkpoint leaves j2's alone.
	require.NoError(t, s1.Discard(1))
	m2, err := s2.Latest()
	require.NoError(t, err)
	require.Equal(t, int64(103), restoreValue(t, s2, m2))
}

// A file of another task or operator, filed under this one, is refused.
func TestFileOfAnotherOwnerRefused(t *testing.T) {
	s, _ := jobStorage(t, state.NewMemFS(), "j1")
	w, err := s.ForOwner(state.FileOwner{Vertex: "src", Subtask: 1, Operator: "op1"}).CreateStateWriter(1, "x")
	require.NoError(t, err)
	_, err = w.Write([]byte("state"))
	require.NoError(t, err)
	h, err := w.Close()
	require.NoError(t, err)
	m := state.Metadata{ID: 1, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "src"}: {Operators: map[string]state.OperatorSubtaskState{"op1": {Operator: &state.OperatorStateHandle{StreamHandle: h}}}},
	}}
	require.NoError(t, s.WriteMetadata(m))
	m, err = s.ReadMetadata(1)
	require.NoError(t, err)
	require.ErrorContains(t, s.Verify(m), "belongs to checkpoint 1 of job j1, task src/1 operator op1, expected checkpoint 1 of job j1, task src/0 operator op1")
	f, err := s.OpenState(h)
	require.NoError(t, err, "the file itself is intact")
	b := make([]byte, f.Size())
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	require.Equal(t, "state", string(b), "readers see the bytes after the header")
	require.NoError(t, f.Close())
}

// A file of weir before metadata version 4 (no header, CRC32C) still
// verifies, and its corruption is still found.
func TestLegacyFileVerifies(t *testing.T) {
	fsys := state.NewMemFS()
	s, err := state.NewFileStorage(state.FileStorageConfig{Dir: "/old", FS: fsys})
	require.NoError(t, err)
	require.NoError(t, fsys.MkdirAll("/old/chk-1"))
	f, err := fsys.Create("/old/chk-1/x")
	require.NoError(t, err)
	_, err = f.Write([]byte("old state"))
	require.NoError(t, err)
	h := state.StreamHandle{Path: "chk-1/x", Size: 9, Checksum: 0xcf542b70, Legacy: true}
	m := state.Metadata{ID: 1, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "src"}: {Operators: map[string]state.OperatorSubtaskState{"op1": {Operator: &state.OperatorStateHandle{StreamHandle: h}}}},
	}}
	require.NoError(t, s.Verify(m), "checksum %08x", crc32.Checksum([]byte("old state"), crc32.MakeTable(crc32.Castagnoli)))
	require.NoError(t, fsys.Corrupt("/old/chk-1/x", func(b []byte) []byte { b[0] ^= 1; return b }))
	require.ErrorContains(t, s.Verify(m), "chk-1/x: checksum")
}

// Only one running job holds a place's lock; the file system's lock (an
// flock) is released when the holder closes it.
func TestLockExcludesSecondJob(t *testing.T) {
	for _, onDisk := range []bool{false, true} {
		t.Run(fmt.Sprint("disk=", onDisk), func(t *testing.T) {
			cfg := state.FileStorageConfig{Dir: "/root", JobID: "j1", FS: state.NewMemFS()}
			if onDisk {
				cfg = state.FileStorageConfig{Dir: t.TempDir(), JobID: "j1"}
			}
			s1, err := state.NewFileStorage(cfg)
			require.NoError(t, err)
			s2, err := state.NewFileStorage(cfg)
			require.NoError(t, err)
			l1, err := s1.Lock()
			require.NoError(t, err)
			_, err = s2.Lock()
			require.ErrorIs(t, err, state.ErrLocked)
			require.ErrorContains(t, err, filepath.Join(s1.Dir(), state.LockFile))
			cfg.JobID = "j2"
			other, err := state.NewFileStorage(cfg)
			require.NoError(t, err)
			l3, err := other.Lock()
			require.NoError(t, err, "another job's place")
			require.NoError(t, l1.Close())
			l2, err := s2.Lock()
			require.NoError(t, err)
			require.NoError(t, errors.Join(l2.Close(), l3.Close()))
		})
	}
}

func TestFindPlaces(t *testing.T) {
	fsys := state.NewMemFS()
	s1, _ := jobStorage(t, fsys, "j1")
	s2, _ := jobStorage(t, fsys, "j2")
	_, _ = jobStorage(t, fsys, "idle") // a place without checkpoints
	for id := barrier.CheckpointID(1); id <= 2; id++ {
		_, err := writeCheckpoint(t, s1, id, 0)
		require.NoError(t, err)
	}
	_, err := writeCheckpoint(t, s2, 7, 0)
	require.NoError(t, err)
	places, err := state.FindPlaces(fsys, "/root")
	require.NoError(t, err)
	require.Equal(t, []state.Place{{JobID: "j1", Newest: 2}, {JobID: "j2", Newest: 7}}, places)
	err = &state.SeveralJobsError{Dir: "/root", Places: places}
	require.EqualError(t, err, "state: /root holds the checkpoints of 2 jobs; restore from one job's directory: /root/j1 (newest chk-2); /root/j2 (newest chk-7)")

	for _, bad := range []string{"", "chk-3", "shared", ".x", "_lock", "a/b", "savepoint-1-x", string(make([]byte, 129))} {
		require.Error(t, state.ValidJobID(bad), "%q", bad)
	}
	require.NoError(t, state.ValidJobID("wordcount-2.prod_1"))
}

// checkpointSet is three checkpoints of job j1 and one of job j2, every
// file's bytes by name ("j1/chk-3/_metadata").
func checkpointSet(t testing.TB) map[string][]byte {
	fsys := state.NewMemFS()
	s1, _ := jobStorage(t, fsys, "j1")
	s2, _ := jobStorage(t, fsys, "j2")
	for id := barrier.CheckpointID(1); id <= 3; id++ {
		_, err := writeCheckpoint(t, s1, id, 100*int64(id))
		require.NoError(t, err)
	}
	_, err := writeCheckpoint(t, s2, 3, 300)
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, job := range []string{"j1", "j2"} {
		for id := 1; id <= 3; id++ {
			for _, f := range checkpointFiles {
				p := fmt.Sprintf("%s/chk-%d/%s", job, id, f)
				if b, err := fsys.Open("/root/" + p); err == nil {
					_ = b.Close()
					files[p] = readFile(t, fsys, "/root/"+p)
				}
			}
		}
	}
	return files
}

// FuzzCheckpointFile replaces one file of job j1's newest checkpoint (3)
// with arbitrary bytes and restores: either checkpoint 3 verifies and
// restores exactly what was written, or it is refused with a
// *CorruptError naming the replaced file and Latest falls back to
// checkpoint 2. The seeds are whole files of other checkpoints and of
// another job, truncations and garbage tails; the readers behind
// verification (DecodeMetadata, the keyed and operator state readers) get
// the bytes too, and must not panic.
func FuzzCheckpointFile(f *testing.F) {
	files := checkpointSet(f)
	for i, name := range checkpointFiles {
		own := files["j1/chk-3/"+name]
		f.Add(uint8(i), own)
		f.Add(uint8(i), own[:len(own)/2])
		f.Add(uint8(i), own[:len(own)-1])
		f.Add(uint8(i), append(bytes.Clone(own), "garbage"...))
		f.Add(uint8(i), []byte{})
		for other, b := range files {
			if other != "j1/chk-3/"+name {
				f.Add(uint8(i), b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		name := checkpointFiles[int(which)%len(checkpointFiles)]
		fsys := state.NewMemFS()
		s, _ := jobStorage(t, fsys, "j1")
		for id := barrier.CheckpointID(1); id <= 3; id++ {
			_, err := writeCheckpoint(t, s, id, 100*int64(id))
			require.NoError(t, err)
		}
		original := readFile(t, fsys, "/root/j1/chk-3/"+name)
		replaceFile(t, fsys, "/root/j1/chk-3/"+name, data)

		_, _ = state.DecodeMetadata(data) // no panic
		m, err := s.ReadMetadata(3)
		if err == nil {
			err = s.Verify(m)
		}
		if err == nil {
			if name != state.MetadataFile {
				require.Equal(t, original, data, "a changed state file verified")
			}
			got, err := s.Latest()
			require.NoError(t, err)
			require.EqualValues(t, 3, got.ID)
			require.Equal(t, int64(303), restoreValue(t, s, got))
			require.Equal(t, []int64{300}, restoreOffsets(t, s, got))
			return
		}
		var ce *state.CorruptError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, path.Join("chk-3", name), ce.Path)
		got, err := s.Latest()
		require.NoError(t, err)
		require.EqualValues(t, 2, got.ID)
		require.Equal(t, int64(203), restoreValue(t, s, got))

		// The readers behind verification, fed the bytes unverified.
		if name != state.MetadataFile {
			h := state.StreamHandle{Path: "x", Size: int64(len(data))}
			b, err := heap.New(heap.Config{MaxParallelism: 8})
			require.NoError(t, err)
			kh := *got.Tasks[state.TaskKey{Vertex: "src"}].Operators["op1"].Keyed
			kh.StreamHandle = h
			_ = b.Restore([]state.KeyedStateHandle{kh}, rawReader{data})
			oh := *got.Tasks[state.TaskKey{Vertex: "src"}].Operators["op1"].Operator
			oh.StreamHandle = h
			_ = state.NewOperatorBackend().Restore([]*state.OperatorStateHandle{&oh}, rawReader{data}, 0, 1)
		}
	})
}

// rawReader serves data, without its header if it has one, unverified.
type rawReader struct{ data []byte }

type rawFile struct{ *bytes.Reader }

func (rawFile) Close() error  { return nil }
func (f rawFile) Size() int64 { return f.Reader.Size() }

func (r rawReader) OpenState(state.StreamHandle) (state.StateFile, error) {
	d := r.data
	if _, hdr, err := state.ReadFileHeader(bytes.NewReader(d), int64(len(d))); err == nil {
		d = d[hdr:]
	}
	return rawFile{bytes.NewReader(d)}, nil
}

// restoreOffsets restores m's operator list state "offsets".
func restoreOffsets(t *testing.T, r state.StateReader, m state.Metadata) []int64 {
	t.Helper()
	ob := state.NewOperatorBackend()
	oh := m.Tasks[state.TaskKey{Vertex: "src"}].Operators["op1"].Operator
	require.NoError(t, ob.Restore([]*state.OperatorStateHandle{oh}, r, 0, 1))
	ol, err := state.GetOperatorListState(ob, state.ListDescriptor[int64]{Name: "offsets", Codec: int64Codec{}}, state.SplitDistribute)
	require.NoError(t, err)
	v, err := ol.Get()
	require.NoError(t, err)
	return v
}
