package state

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// FS is the file system seam of FileStorage: the few operations it needs,
// so tests can inject failures (a full disk, a read-only directory).
type FS interface {
	// Create creates or truncates the named file for writing.
	Create(name string) (File, error)
	// Open opens the named file for reading.
	Open(name string) (File, error)
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything under it; missing is no error.
	RemoveAll(name string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string) error
	// ReadDir lists the names in a directory, sorted.
	ReadDir(dir string) ([]string, error)
	// SyncDir makes a directory's entries (creations, renames) durable.
	SyncDir(dir string) error
	// Lock takes an exclusive lock named by the file name (created if
	// missing), held until the result is closed; it fails at once with
	// ErrLocked while another holder has it.
	Lock(name string) (io.Closer, error)
}

// File is an open file of an FS.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync makes the written data durable.
	Sync() error
	// Size is the file's current size.
	Size() (int64, error)
}

// OSFS is the operating system's file system.
type OSFS struct{}

type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (OSFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (OSFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (OSFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (OSFS) Remove(name string) error             { return os.Remove(name) }
func (OSFS) RemoveAll(name string) error          { return os.RemoveAll(name) }
func (OSFS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o755) }

func (OSFS) ReadDir(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	return names, nil
}

func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock takes an exclusive flock of name (see lock_unix.go).
func (OSFS) Lock(name string) (io.Closer, error) { return lockFile(name) }

// MemFS is an in-memory FS for tests (and MemoryStorage). Paths are
// slash-separated; it is safe for concurrent use.
type MemFS struct {
	mu struct {
		sync.Mutex
		files map[string][]byte
		dirs  map[string]bool
		locks map[string]bool
	}
}

// NewMemFS returns an empty in-memory file system.
func NewMemFS() *MemFS {
	m := &MemFS{}
	m.mu.files = map[string][]byte{}
	m.mu.dirs = map[string]bool{"/": true, ".": true}
	m.mu.locks = map[string]bool{}
	return m
}

// Lock takes the in-memory lock name.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	name = memClean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.parentExistsLocked(name); err != nil {
		return nil, err
	}
	if m.mu.locks[name] {
		return nil, ErrLocked
	}
	m.mu.locks[name] = true
	if _, ok := m.mu.files[name]; !ok {
		m.mu.files[name] = nil
	}
	return &memLock{fs: m, name: name}, nil
}

type memLock struct {
	fs   *MemFS
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.mu.locks, l.name)
		l.fs.mu.Unlock()
	})
	return nil
}

func memClean(name string) string { return path.Clean(filepath.ToSlash(name)) }

func (m *MemFS) parentExistsLocked(name string) error {
	if dir := path.Dir(name); !m.mu.dirs[dir] {
		return &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return nil
}

func (m *MemFS) Create(name string) (File, error) {
	name = memClean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.parentExistsLocked(name); err != nil {
		return nil, err
	}
	if m.mu.dirs[name] {
		return nil, &fs.PathError{Op: "create", Path: name, Err: errors.New("is a directory")}
	}
	m.mu.files[name] = nil
	return &memFile{fs: m, name: name, write: true}, nil
}

func (m *MemFS) Open(name string) (File, error) {
	name = memClean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.mu.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{fs: m, name: name, r: bytes.NewReader(b)}, nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = memClean(oldname), memClean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.parentExistsLocked(newname); err != nil {
		return err
	}
	if b, ok := m.mu.files[oldname]; ok {
		delete(m.mu.files, oldname)
		m.mu.files[newname] = b
		return nil
	}
	if !m.mu.dirs[oldname] {
		return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	if m.mu.dirs[newname] || m.mu.files[newname] != nil {
		return &fs.PathError{Op: "rename", Path: newname, Err: fs.ErrExist}
	}
	pre := oldname + "/"
	for d := range m.mu.dirs {
		if d == oldname || strings.HasPrefix(d, pre) {
			delete(m.mu.dirs, d)
			m.mu.dirs[newname+strings.TrimPrefix(d, oldname)] = true
		}
	}
	for f, b := range m.mu.files {
		if strings.HasPrefix(f, pre) {
			delete(m.mu.files, f)
			m.mu.files[newname+strings.TrimPrefix(f, oldname)] = b
		}
	}
	return nil
}

func (m *MemFS) Remove(name string) error {
	name = memClean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mu.files[name]; ok {
		delete(m.mu.files, name)
		return nil
	}
	if m.mu.dirs[name] {
		for f := range m.mu.files {
			if path.Dir(f) == name {
				return &fs.PathError{Op: "remove", Path: name, Err: errors.New("directory not empty")}
			}
		}
		delete(m.mu.dirs, name)
		return nil
	}
	return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
}

func (m *MemFS) RemoveAll(name string) error {
	name = memClean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	pre := name + "/"
	delete(m.mu.files, name)
	delete(m.mu.dirs, name)
	for f := range m.mu.files {
		if strings.HasPrefix(f, pre) {
			delete(m.mu.files, f)
		}
	}
	for d := range m.mu.dirs {
		if strings.HasPrefix(d, pre) {
			delete(m.mu.dirs, d)
		}
	}
	return nil
}

func (m *MemFS) MkdirAll(dir string) error {
	dir = memClean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := dir; !m.mu.dirs[d]; d = path.Dir(d) {
		if _, ok := m.mu.files[d]; ok {
			return &fs.PathError{Op: "mkdir", Path: d, Err: errors.New("not a directory")}
		}
		m.mu.dirs[d] = true
	}
	return nil
}

func (m *MemFS) ReadDir(dir string) ([]string, error) {
	dir = memClean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mu.dirs[dir] {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var names []string
	for f := range m.mu.files {
		if path.Dir(f) == dir {
			names = append(names, path.Base(f))
		}
	}
	for d := range m.mu.dirs {
		if d != dir && path.Dir(d) == dir {
			names = append(names, path.Base(d))
		}
	}
	sort.Strings(names)
	return names, nil
}

func (m *MemFS) SyncDir(dir string) error {
	dir = memClean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mu.dirs[dir] {
		return &fs.PathError{Op: "sync", Path: dir, Err: fs.ErrNotExist}
	}
	return nil
}

// Corrupt applies f to the named file's bytes (tests: truncation, bit flips).
func (m *MemFS) Corrupt(name string, f func([]byte) []byte) error {
	name = memClean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.mu.files[name]
	if !ok {
		return &fs.PathError{Op: "corrupt", Path: name, Err: fs.ErrNotExist}
	}
	m.mu.files[name] = f(bytes.Clone(b))
	return nil
}

type memFile struct {
	fs    *MemFS
	name  string
	write bool
	r     *bytes.Reader
	buf   []byte
}

func (f *memFile) Read(p []byte) (int, error) {
	if f.r == nil {
		return 0, errors.New("memfs: file not open for reading")
	}
	return f.r.Read(p)
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if f.r == nil {
		return 0, errors.New("memfs: file not open for reading")
	}
	return f.r.ReadAt(p, off)
}

func (f *memFile) Write(p []byte) (int, error) {
	if !f.write {
		return 0, errors.New("memfs: file not open for writing")
	}
	f.buf = append(f.buf, p...)
	// Publish on every write so that a crash (never closing) still leaves
	// the partial file, as on a real disk.
	f.fs.mu.Lock()
	if _, ok := f.fs.mu.files[f.name]; ok {
		f.fs.mu.files[f.name] = f.buf[:len(f.buf):len(f.buf)]
	}
	f.fs.mu.Unlock()
	return len(p), nil
}

func (f *memFile) Sync() error  { return nil }
func (f *memFile) Close() error { return nil }

func (f *memFile) Size() (int64, error) {
	if f.r != nil {
		return f.r.Size(), nil
	}
	return int64(len(f.buf)), nil
}
