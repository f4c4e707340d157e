// Package storagetest is the table of checkpoint storages the checkpoint,
// savepoint, rescale, incremental and corruption tests run on: a directory
// of the operating system's file system, and a bucket of an S3 server in
// the test process (internal/s3test, gofakes3 over real HTTP on the
// loopback interface), which the AWS_* environment points every storage
// the job opens at. A test calls Run and gets one subtest per storage,
// with what it needs to act on that storage the same way on both: fresh
// checkpoint roots and savepoint targets, joining locations, reading,
// writing, removing and corrupting the files (objects) a checkpoint left.
// Nothing outside tests imports it.
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/s3"
)

// The buckets of the s3 row: checkpoint roots and savepoint targets.
const (
	CheckpointBucket = "ckpt"
	SavepointBucket  = "savepoints"
)

// Storage is one row of the table, for the duration of one subtest.
type Storage struct {
	// Name is "file" or "s3".
	Name string
	// Server is the S3 server of the s3 row (nil for file); tests inject
	// faults through it.
	Server *s3test.Server

	t testing.TB
	n int
}

// Names are the rows, in the order Run runs them.
var Names = []string{"file", "s3"}

// Run runs f in a subtest per storage. The s3 row's server is started for
// its subtest and closed at its end; the subtest's environment points the
// AWS chain at it (so the subtest and its callers must not be parallel).
func Run(t *testing.T, f func(t *testing.T, s *Storage)) {
	t.Helper()
	for _, name := range Names {
		t.Run(name, func(t *testing.T) { f(t, Start(t, name)) })
	}
}

// Start returns storage name ("file" or "s3") for t.
func Start(t testing.TB, name string) *Storage {
	t.Helper()
	s := &Storage{Name: name, t: t}
	switch name {
	case "file":
	case "s3":
		srv, err := s3test.Start(CheckpointBucket, SavepointBucket)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, srv.Close()) })
		for k, v := range srv.Env() {
			t.Setenv(k, v)
		}
		s.Server = srv
	default:
		t.Fatalf("storagetest: no storage %q", name)
	}
	return s
}

// S3 reports whether s is the object storage row.
func (s *Storage) S3() bool { return s.Server != nil }

// SkipS3Short skips the s3 row of a slow test under -short.
func (s *Storage) SkipS3Short() {
	if s.S3() && testing.Short() {
		s.t.Skip("storagetest: the s3 row of a slow test runs without -short")
	}
}

func (s *Storage) fresh() string {
	s.n++
	name := strings.NewReplacer("/", "-", " ", "_", "=", "-").Replace(s.t.Name())
	return fmt.Sprintf("%s-%d", name, s.n)
}

// Root returns a fresh checkpoint root (CheckpointConfig.Dir).
func (s *Storage) Root() string {
	if s.S3() {
		return s3.Scheme + CheckpointBucket + "/" + s.fresh()
	}
	return s.t.TempDir()
}

// Savepoints returns a fresh savepoint target (TriggerSavepoint's dir).
func (s *Storage) Savepoints() string {
	if s.S3() {
		return s3.Scheme + SavepointBucket + "/" + s.fresh()
	}
	return s.t.TempDir()
}

// Join joins a location and path elements.
func (s *Storage) Join(loc string, elem ...string) string {
	if s3.IsURL(loc) {
		return strings.TrimSuffix(loc, "/") + "/" + path.Join(elem...)
	}
	return filepath.Join(append([]string{loc}, elem...)...)
}

// Dir returns the location that holds loc.
func (s *Storage) Dir(loc string) string {
	if s3.IsURL(loc) {
		loc = strings.TrimSuffix(loc, "/")
		return loc[:strings.LastIndex(loc, "/")]
	}
	return filepath.Dir(loc)
}

// Checkpoint returns the location of checkpoint id of job jobID under
// root.
func (s *Storage) Checkpoint(root, jobID string, id barrier.CheckpointID) string {
	return s.Join(root, jobID, fmt.Sprintf("chk-%d", id))
}

// Open opens the storage of job jobID ("": root itself) under root, as a
// job does; it is closed when the test ends.
func (s *Storage) Open(root, jobID string) state.Storage {
	s.t.Helper()
	return s.OpenLogged(root, jobID, nil)
}

// OpenLogged is Open with the storage's logger (nil: none).
func (s *Storage) OpenLogged(root, jobID string, log *zap.Logger) state.Storage {
	s.t.Helper()
	if !s3.IsURL(root) {
		st, err := state.NewFileStorage(state.FileStorageConfig{Dir: root, JobID: jobID, Logger: log})
		require.NoError(s.t, err)
		return st
	}
	cfg, err := s3.FromURL(root, jobID)
	require.NoError(s.t, err)
	cfg.Logger = log
	st, err := s3.New(context.Background(), cfg)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { st.Close() })
	return st
}

// OpenSavepoint opens the savepoint at p.
func (s *Storage) OpenSavepoint(p string) (state.Metadata, error) {
	s.t.Helper()
	if !s3.IsURL(p) {
		m, _, err := state.OpenSavepoint(p, nil)
		return m, err
	}
	m, _, err := s.Open(s.Dir(p), "").OpenSavepoint(p)
	return m, err
}

func (s *Storage) object(loc string) (bucket, key string) {
	s.t.Helper()
	bucket, key, err := s3.ParseURL(loc)
	require.NoError(s.t, err)
	return bucket, key
}

// Exists reports whether loc is a file or directory (an object, or a
// prefix of objects).
func (s *Storage) Exists(loc string) bool {
	s.t.Helper()
	if !s3.IsURL(loc) {
		_, err := os.Stat(loc)
		return err == nil
	}
	bucket, key := s.object(loc)
	if _, err := s.Server.Get(bucket, key); err == nil {
		return true
	}
	keys, err := s.Server.Keys(bucket, key+"/")
	require.NoError(s.t, err)
	return len(keys) > 0
}

// List returns the names directly under loc (files and directories; an
// object store's objects and common prefixes), sorted.
func (s *Storage) List(loc string) []string {
	s.t.Helper()
	if !s3.IsURL(loc) {
		entries, err := os.ReadDir(loc)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		require.NoError(s.t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	bucket, prefix := s.object(loc)
	if prefix != "" {
		prefix += "/"
	}
	keys, err := s.Server.Keys(bucket, prefix)
	require.NoError(s.t, err)
	var names []string
	for _, k := range keys {
		name, _, _ := strings.Cut(strings.TrimPrefix(k, prefix), "/")
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Files returns every file (object) under loc, as locations, sorted.
func (s *Storage) Files(loc string) []string {
	s.t.Helper()
	if !s3.IsURL(loc) {
		var files []string
		err := filepath.WalkDir(loc, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, p)
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		})
		require.NoError(s.t, err)
		return files
	}
	bucket, prefix := s.object(loc)
	if prefix != "" {
		prefix += "/"
	}
	keys, err := s.Server.Keys(bucket, prefix)
	require.NoError(s.t, err)
	var files []string
	for _, k := range keys {
		files = append(files, s3.Scheme+bucket+"/"+k)
	}
	slices.Sort(files)
	return files
}

// Read returns the bytes of the file (object) at loc.
func (s *Storage) Read(loc string) []byte {
	s.t.Helper()
	if !s3.IsURL(loc) {
		b, err := os.ReadFile(loc)
		require.NoError(s.t, err)
		return b
	}
	b, err := s.Server.Get(s.object(loc))
	require.NoError(s.t, err, "read %s", loc)
	return b
}

// Write replaces the file (object) at loc.
func (s *Storage) Write(loc string, data []byte) {
	s.t.Helper()
	if !s3.IsURL(loc) {
		require.NoError(s.t, os.WriteFile(loc, data, 0o644))
		return
	}
	bucket, key := s.object(loc)
	require.NoError(s.t, s.Server.Put(bucket, key, data))
}

// Remove deletes the file (object) at loc.
func (s *Storage) Remove(loc string) {
	s.t.Helper()
	if !s3.IsURL(loc) {
		require.NoError(s.t, os.Remove(loc))
		return
	}
	bucket, key := s.object(loc)
	require.NoError(s.t, s.Server.Delete(bucket, key))
}

// Corrupt flips a byte in the middle of a non-empty state file directly
// in dir (not its metadata) and returns the file's location.
func (s *Storage) Corrupt(dir string) string {
	s.t.Helper()
	for _, name := range s.List(dir) {
		if name == state.MetadataFile {
			continue
		}
		loc := s.Join(dir, name)
		if !s.S3() {
			if fi, err := os.Stat(loc); err != nil || fi.IsDir() {
				continue
			}
		} else if _, err := s.Server.Get(s.object(loc)); err != nil {
			continue // a prefix
		}
		b := s.Read(loc)
		if len(b) == 0 {
			continue
		}
		b[len(b)/2] ^= 0xff
		s.Write(loc, b)
		return loc
	}
	s.t.Fatalf("storagetest: no state file to corrupt in %s", dir)
	return ""
}
