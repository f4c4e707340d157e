package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/internal/storagetest"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// errorFS wraps an FS and fails chosen operations (Pebble's errorfs idea).
type errorFS struct {
	state.FS
	mu   sync.Mutex
	fail func(op, name string) error
}

func (e *errorFS) check(op, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail == nil {
		return nil
	}
	return e.fail(op, name)
}

func (e *errorFS) setFail(f func(op, name string) error) {
	e.mu.Lock()
	e.fail = f
	e.mu.Unlock()
}

func (e *errorFS) Create(name string) (state.File, error) {
	if err := e.check("create", name); err != nil {
		return nil, &fs.PathError{Op: "create", Path: name, Err: err}
	}
	f, err := e.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, fs: e, name: name}, nil
}

func (e *errorFS) Rename(o, n string) error {
	if err := e.check("rename", n); err != nil {
		return err
	}
	return e.FS.Rename(o, n)
}

func (e *errorFS) SyncDir(d string) error {
	if err := e.check("syncdir", d); err != nil {
		return err
	}
	return e.FS.SyncDir(d)
}

func (e *errorFS) MkdirAll(d string) error {
	if err := e.check("mkdir", d); err != nil {
		return err
	}
	return e.FS.MkdirAll(d)
}

type errorFile struct {
	state.File
	fs   *errorFS
	name string
}

func (f *errorFile) Write(p []byte) (int, error) {
	if err := f.fs.check("write", f.name); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *errorFile) Sync() error {
	if err := f.fs.check("sync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

// writeCheckpoint snapshots a heap backend holding n keys with value
// base+i (and an operator list state) and completes checkpoint id.
func writeCheckpoint(t testing.TB, s state.Storage, id barrier.CheckpointID, base int64) (state.Metadata, error) {
	t.Helper()
	b, err := heap.New(heap.Config{MaxParallelism: 8})
	require.NoError(t, err)
	vs, err := state.GetValueState(b, state.ValueDescriptor[int64]{Name: "v", Codec: int64Codec{}})
	require.NoError(t, err)
	for i := range 8 {
		b.SetCurrentKey([]byte{byte(i)}, i)
		require.NoError(t, vs.Update(base+int64(i)))
	}
	ob := state.NewOperatorBackend()
	ol, err := state.GetOperatorListState(ob, state.ListDescriptor[int64]{Name: "offsets", Codec: int64Codec{}}, state.SplitDistribute)
	require.NoError(t, err)
	require.NoError(t, ol.Add(base))
	w := state.PrefixedWriters(s.ForOwner(state.FileOwner{Vertex: "src", Operator: "op1"}), "src-0-op1")
	krun, err := b.Snapshot(id, w)
	require.NoError(t, err)
	orun, err := ob.Snapshot(id, w)
	require.NoError(t, err)
	kh, err := krun(context.Background())
	if err != nil {
		return state.Metadata{}, err
	}
	oh, err := orun(context.Background())
	if err != nil {
		return state.Metadata{}, err
	}
	m := state.Metadata{ID: id, Timestamp: 1000 + int64(id), Kind: barrier.Checkpoint, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "src", Subtask: 0}: {Operators: map[string]state.OperatorSubtaskState{"op1": {Keyed: kh, Operator: oh}}},
	}}
	return m, s.WriteMetadata(m)
}

// restoreValue restores m's keyed state and returns key 3's value.
func restoreValue(t *testing.T, r state.StateReader, m state.Metadata) int64 {
	t.Helper()
	b, err := heap.New(heap.Config{MaxParallelism: 8})
	require.NoError(t, err)
	st := m.Tasks[state.TaskKey{Vertex: "src"}].Operators["op1"]
	require.NoError(t, b.Restore([]state.KeyedStateHandle{*st.Keyed}, r))
	vs, err := state.GetValueState(b, state.ValueDescriptor[int64]{Name: "v", Codec: int64Codec{}})
	require.NoError(t, err)
	b.SetCurrentKey([]byte{3}, 3)
	v, err := vs.Value()
	require.NoError(t, err)
	return v
}

func newStorage(t *testing.T) (*state.FileStorage, *errorFS, *observer.ObservedLogs) {
	core, logs := observer.New(zap.ErrorLevel)
	efs := &errorFS{FS: state.NewMemFS()}
	s, err := state.NewFileStorage(state.FileStorageConfig{Dir: "/ckpt", FS: efs, Logger: zap.New(core)})
	require.NoError(t, err)
	return s, efs, logs
}

func TestStorageRoundTripAndLayout(t *testing.T) {
	for _, onDisk := range []bool{false, true} {
		t.Run(fmt.Sprint("disk=", onDisk), func(t *testing.T) {
			var s *state.FileStorage
			if onDisk {
				var err error
				s, err = state.NewFileStorage(state.FileStorageConfig{Dir: t.TempDir()})
				require.NoError(t, err)
			} else {
				s = state.NewMemoryStorage()
			}
			m, err := writeCheckpoint(t, s, 7, 100)
			require.NoError(t, err)
			names, err := s.FS().ReadDir(filepath.Join(s.Dir(), "chk-7"))
			require.NoError(t, err)
			require.Equal(t, []string{"_metadata", "src-0-op1-keyed", "src-0-op1-operator"}, names)
			got, err := s.ReadMetadata(7)
			require.NoError(t, err)
			require.Equal(t, m, got)
			for _, h := range got.StreamHandles() {
				require.False(t, path.IsAbs(h.Path), "relative paths: %s", h.Path)
			}
			latest, err := s.Latest()
			require.NoError(t, err)
			require.Equal(t, barrier.CheckpointID(7), latest.ID)
			require.Equal(t, int64(103), restoreValue(t, s, latest))

			sp, err := s.ExportSavepoint(m, filepath.Join(s.Dir(), "savepoints"))
			require.NoError(t, err)
			require.NoError(t, s.Discard(7))
			require.NoError(t, s.Discard(7), "missing is no error")
			_, err = s.ReadMetadata(7)
			require.ErrorIs(t, err, state.ErrNotFound)
			_, err = s.Latest()
			require.ErrorIs(t, err, state.ErrNotFound)

			spm, sps, err := s.OpenSavepoint(sp)
			require.NoError(t, err)
			require.Equal(t, int64(103), restoreValue(t, sps, spm))
			if onDisk {
				spm2, sps2, err := state.OpenSavepoint(sp, nil)
				require.NoError(t, err)
				require.Equal(t, int64(103), restoreValue(t, sps2, spm2))
			}
		})
	}
}

func TestInvalidNames(t *testing.T) {
	s := state.NewMemoryStorage()
	for _, n := range []string{"", "_metadata", "../x", "a/b", ".hidden"} {
		_, err := s.CreateStateWriter(1, n)
		require.Error(t, err, n)
	}
	_, err := s.OpenState(state.StreamHandle{Path: "../../etc/passwd"})
	require.Error(t, err)
}

// A failed write (full disk, read-only directory, failing fsync or rename)
// returns a clear error and leaves the previous checkpoint intact.
func TestFailedWriteKeepsPreviousCheckpoint(t *testing.T) {
	cases := []struct {
		name string
		fail func(op, name string) error
		want string
	}{
		{"disk full on state file", func(op, name string) error {
			if op == "write" && strings.Contains(name, "chk-2") {
				return syscall.ENOSPC
			}
			return nil
		}, "no space left on device"},
		{"read-only dir", func(op, name string) error {
			if op == "create" && strings.Contains(name, "chk-2") {
				return syscall.EROFS
			}
			return nil
		}, "read-only file system"},
		{"fsync of metadata fails", func(op, name string) error {
			if op == "sync" && strings.Contains(name, "chk-2/._metadata") {
				return syscall.EIO
			}
			return nil
		}, "input/output error"},
		{"rename of metadata fails", func(op, name string) error {
			if op == "rename" && strings.HasSuffix(name, "chk-2/_metadata") {
				return syscall.EIO
			}
			return nil
		}, "rename chk-2/_metadata"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, efs, _ := newStorage(t)
			_, err := writeCheckpoint(t, s, 1, 100)
			require.NoError(t, err)
			efs.setFail(tc.fail)
			_, err = writeCheckpoint(t, s, 2, 200)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			efs.setFail(nil)
			m, err := s.Latest()
			require.NoError(t, err)
			require.Equal(t, barrier.CheckpointID(1), m.ID)
			require.Equal(t, int64(103), restoreValue(t, s, m))
			// No temporary files are left behind.
			names, _ := s.FS().ReadDir("/ckpt/chk-2")
			for _, n := range names {
				require.NotContains(t, n, ".tmp-")
			}
		})
	}
}

// Truncation or a bit flip in a state file or in _metadata, in a
// directory or a bucket, is detected, and Latest falls back to the
// previous checkpoint, logging why.
func TestCorruptionDetectedAndFallback(t *testing.T) {
	type corruption struct {
		name string
		f    func([]byte) []byte
	}
	corruptions := []corruption{
		{"truncate", func(b []byte) []byte { return b[:len(b)-3] }},
		{"bitflip", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }},
		{"bitflip-first", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"empty", func(b []byte) []byte { return nil }},
	}
	storagetest.Run(t, func(t *testing.T, sto *storagetest.Storage) {
		for _, file := range []string{"_metadata", "src-0-op1-keyed", "src-0-op1-operator"} {
			for _, c := range corruptions {
				t.Run(file+"/"+c.name, func(t *testing.T) {
					core, logs := observer.New(zap.ErrorLevel)
					root := sto.Root()
					s := sto.OpenLogged(root, "job", zap.New(core))
					_, err := writeCheckpoint(t, s, 1, 100)
					require.NoError(t, err)
					m2, err := writeCheckpoint(t, s, 2, 200)
					require.NoError(t, err)
					loc := sto.Join(sto.Checkpoint(root, "job", 2), file)
					sto.Write(loc, c.f(sto.Read(loc)))

					var ce *state.CorruptError
					if file == "_metadata" {
						_, err := s.ReadMetadata(2)
						require.ErrorAs(t, err, &ce)
					} else {
						var h state.StreamHandle
						for _, sh := range m2.StreamHandles() {
							if strings.HasSuffix(sh.Path, file) {
								h = sh
							}
						}
						_, err := s.OpenState(h)
						require.ErrorAs(t, err, &ce)
					}
					if sto.S3() {
						require.Equal(t, loc, ce.Path, "the object is named")
					} else {
						require.Equal(t, "chk-2/"+file, ce.Path)
					}
					m, err := s.Latest()
					require.NoError(t, err)
					require.Equal(t, barrier.CheckpointID(1), m.ID)
					require.Equal(t, 1, logs.Len())
					entry := logs.All()[0]
					require.Contains(t, entry.Message, "corrupt checkpoint")
					require.Equal(t, uint64(2), entry.ContextMap()["checkpoint"])
				})
			}
		}
	})
}

// An in-progress checkpoint (state files but no metadata) is not
// complete, in a directory or a bucket.
func TestIncompleteCheckpointIgnored(t *testing.T) {
	storagetest.Run(t, func(t *testing.T, sto *storagetest.Storage) {
		core, logs := observer.New(zap.ErrorLevel)
		s := sto.OpenLogged(sto.Root(), "job", zap.New(core))
		_, err := writeCheckpoint(t, s, 1, 100)
		require.NoError(t, err)
		w, err := s.CreateStateWriter(5, "x")
		require.NoError(t, err)
		_, err = w.Write([]byte("partial"))
		require.NoError(t, err)
		_, err = w.Close()
		require.NoError(t, err)
		m, err := s.Latest()
		require.NoError(t, err)
		require.Equal(t, barrier.CheckpointID(1), m.ID)
		require.Zero(t, logs.Len())
		ids, err := s.Checkpoints()
		require.NoError(t, err)
		require.Equal(t, []barrier.CheckpointID{5, 1}, ids)
	})
}

func TestExportSavepointFailureLeavesNothing(t *testing.T) {
	s, efs, _ := newStorage(t)
	m, err := writeCheckpoint(t, s, 1, 100)
	require.NoError(t, err)
	efs.setFail(func(op, name string) error {
		if op == "write" && strings.Contains(name, "savepoint") {
			return syscall.ENOSPC
		}
		return nil
	})
	_, err = s.ExportSavepoint(m, "/sp")
	require.ErrorIs(t, err, syscall.ENOSPC)
	names, err := s.FS().ReadDir("/sp")
	require.NoError(t, err)
	require.Empty(t, names)
	efs.setFail(nil)
	p, err := s.ExportSavepoint(m, "/sp")
	require.NoError(t, err)
	// Savepoints are self-contained: discarding the checkpoint keeps them.
	require.NoError(t, s.Discard(1))
	sm, ss, err := s.OpenSavepoint(p)
	require.NoError(t, err)
	require.Equal(t, int64(103), restoreValue(t, ss, sm))
	require.NoError(t, efs.FS.(*state.MemFS).Corrupt(p+"/_metadata", func(b []byte) []byte { b[9] ^= 4; return b }))
	_, _, err = s.OpenSavepoint(p)
	var ce *state.CorruptError
	require.True(t, errors.As(err, &ce))
}

func TestMetadataEncoding(t *testing.T) {
	m := state.Metadata{ID: 42, Timestamp: -5, Kind: barrier.Savepoint, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "a", Subtask: 1}: {Operators: map[string]state.OperatorSubtaskState{
			"op": {Keyed: &state.KeyedStateHandle{StreamHandle: state.StreamHandle{Path: "chk-42/x", Size: 99, Checksum: 0xdeadbeef},
				KeyGroups: keygroup.Range{Start: 3, End: 5}, Offsets: []int64{10, 20, 30}}},
			"op2": {Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: "chk-42/y", Size: 7},
				States: map[string]state.OperatorStateMeta{"s": {Distribution: state.UnionDistribute, Offsets: []int64{4}}, "e": {}}}},
			"none": {},
		}},
		{Vertex: "b", Subtask: 0}: {Operators: map[string]state.OperatorSubtaskState{}},
	}}
	enc := state.EncodeMetadata(m)
	require.Equal(t, enc, state.EncodeMetadata(m), "deterministic")
	got, err := state.DecodeMetadata(enc)
	require.NoError(t, err)
	require.Equal(t, m.Clone(), got)
	// Every truncation and every single-bit flip is detected.
	for i := range enc {
		_, err := state.DecodeMetadata(enc[:i])
		require.Error(t, err, "truncated to %d", i)
		for bit := range 8 {
			b := append([]byte(nil), enc...)
			b[i] ^= 1 << bit
			_, err := state.DecodeMetadata(b)
			require.Error(t, err, "flip byte %d bit %d", i, bit)
		}
	}
}

func FuzzDecodeMetadata(f *testing.F) {
	f.Add(state.EncodeMetadata(state.Metadata{ID: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := state.DecodeMetadata(b)
		if err == nil {
			require.Equal(t, b, state.EncodeMetadata(m))
		}
	})
}

func TestKeyedSnapshotWriterOrder(t *testing.T) {
	s := state.NewMemoryStorage()
	sw, err := s.CreateStateWriter(1, "k")
	require.NoError(t, err)
	w := state.NewKeyedSnapshotWriter(sw, 8, keygroup.Range{Start: 2, End: 3}, []state.StateMeta{{Name: "v", Kind: state.KindValue}})
	require.Error(t, w.Record(0, []byte("k"), nil, []byte("v")), "record outside a group")
	require.Error(t, w.BeginKeyGroup(3))
	require.NoError(t, w.BeginKeyGroup(2))
	require.Error(t, w.Record(1, []byte("k"), nil, nil), "unknown state")
	_, err = w.Close()
	require.Error(t, err, "group 3 missing")
}

// Section checksums catch corruption even through a reader that does not
// verify whole files.
type unverified struct{ fs state.FS }

type memStateFile struct {
	*io.SectionReader
	state.File
}

func (f memStateFile) ReadAt(p []byte, off int64) (int, error) { return f.SectionReader.ReadAt(p, off) }
func (f memStateFile) Read(p []byte) (int, error)              { return f.SectionReader.Read(p) }
func (f memStateFile) Size() int64                             { return f.SectionReader.Size() }

// OpenState skips the binding header without checking anything.
func (u unverified) OpenState(h state.StreamHandle) (state.StateFile, error) {
	f, err := u.fs.Open("/checkpoints/" + h.Path)
	if err != nil {
		return nil, err
	}
	n, _ := f.Size()
	_, hdr, err := state.ReadFileHeader(f, n)
	if err != nil {
		return nil, err
	}
	return memStateFile{io.NewSectionReader(f, hdr, n-hdr), f}, nil
}

func TestKeyedSectionChecksum(t *testing.T) {
	s := state.NewMemoryStorage()
	m, err := writeCheckpoint(t, s, 1, 0)
	require.NoError(t, err)
	kh := *m.Tasks[state.TaskKey{Vertex: "src"}].Operators["op1"].Keyed
	require.NoError(t, s.FS().(*state.MemFS).Corrupt("/checkpoints/"+kh.Path, func(b []byte) []byte {
		_, hdr, err := state.ReadFileHeader(bytes.NewReader(b), int64(len(b)))
		require.NoError(t, err)
		b[hdr+kh.Offsets[5]+3] ^= 0x40
		return b
	}))
	b, err := heap.New(heap.Config{MaxParallelism: 8})
	require.NoError(t, err)
	err = b.Restore([]state.KeyedStateHandle{kh}, unverified{s.FS()})
	var ce *state.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Reason, "key group 5")
	// A restore that does not own group 5 does not read it.
	b2, err := heap.New(heap.Config{MaxParallelism: 8, Parallelism: 2, Index: 0})
	require.NoError(t, err)
	require.NoError(t, b2.Restore([]state.KeyedStateHandle{kh}, unverified{s.FS()}))
}
