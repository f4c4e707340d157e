package state

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
)

// Storage is checkpoint storage: where state files and checkpoint metadata
// live. Implementations are safe for concurrent use.
type Storage interface {
	StateWriterFactory
	StateReader

	// ForOwner returns a factory whose files' binding headers name owner
	// (see FileOwner); it is a SharedStateWriterFactory if the storage
	// keeps shared files. The storage's own CreateStateWriter names an
	// empty owner.
	ForOwner(owner FileOwner) StateWriterFactory

	// WriteMetadata writes m durably, with the storage's job ID as
	// m.JobID; it makes checkpoint m.ID complete.
	WriteMetadata(m Metadata) error
	// ReadMetadata reads and verifies the metadata of checkpoint id
	// (ErrNotFound if it has none; *CorruptError if it does not verify,
	// or if it is the metadata of another checkpoint or job).
	ReadMetadata(id barrier.CheckpointID) (Metadata, error)
	// Discard removes checkpoint id and all its files; missing is no error.
	Discard(id barrier.CheckpointID) error
	// ExportSavepoint copies m's state files and metadata into a fresh,
	// self-contained directory under dir and returns its path. Retention
	// never touches it.
	ExportSavepoint(m Metadata, dir string) (string, error)
	// Latest returns the newest completed checkpoint whose metadata and
	// state files all verify (ErrNotFound if there is none).
	Latest() (Metadata, error)
	// Checkpoints lists the IDs of the checkpoints the storage holds,
	// complete or not, newest first: a job restarted on the same place
	// continues after them instead of overwriting them.
	Checkpoints() ([]barrier.CheckpointID, error)
	// OpenSavepoint opens a savepoint written by ExportSavepoint; the
	// returned Storage reads its state files.
	OpenSavepoint(path string) (Metadata, Storage, error)
}

// Location names a storage place so that another process can open the
// same storage: the coordinator of a job across processes sends its
// workers the Location of its checkpoint storage and of the checkpoint it
// restores from, never a storage. Credentials are not part of it: each
// process takes its own from its environment.
type Location struct {
	// Root is the storage root: a directory on a file system every
	// process mounts, or a URL ("s3://bucket/prefix").
	Root string `json:"Root"`
	// JobID is the job whose place under Root the storage is ("": Root
	// itself, as for a savepoint).
	JobID string `json:"JobID,omitempty"`
}

// String returns the place: Root/JobID, or Root.
func (l Location) String() string {
	if l.JobID == "" {
		return l.Root
	}
	return strings.TrimSuffix(l.Root, "/") + "/" + l.JobID
}

// ErrNotFound is returned when a checkpoint or savepoint does not exist.
var ErrNotFound = errors.New("state: checkpoint not found")

// CorruptError reports a state or metadata file that failed verification
// (checksum, size, or format).
type CorruptError struct {
	Path   string
	Reason string
	Err    error // underlying cause, if any
}

func (e *CorruptError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("state: corrupt file %s: %s: %v", e.Path, e.Reason, e.Err)
	}
	return fmt.Sprintf("state: corrupt file %s: %s", e.Path, e.Reason)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// MetadataFile is the name of the metadata file of a checkpoint directory.
const MetadataFile = "_metadata"

// ErrLocked is returned by FileStorage.Lock when another running job holds
// the lock of the same checkpoint place.
var ErrLocked = errors.New("state: checkpoint storage is in use by another running job")

// LockFile is the name of the lock file of a job's checkpoint place.
const LockFile = "_lock"

// FileStorageConfig configures a FileStorage.
type FileStorageConfig struct {
	// Dir is the checkpoint root (required).
	Dir string
	// JobID is the job whose checkpoints the storage holds: they live in
	// the job's own place, Dir/JobID/chk-N/, and the ID is recorded in
	// every metadata and state file (see FileOwner). Empty: the place is
	// Dir itself (the layout of weir before metadata version 4), and no
	// job ID is recorded. It must be a valid job ID (ValidJobID).
	JobID string
	// FS is the file system; nil means OSFS.
	FS FS
	// Logger receives errors about skipped checkpoints; nil means no logging.
	Logger *zap.Logger
}

// Validate checks the configuration.
func (c FileStorageConfig) Validate() error {
	if c.Dir == "" {
		return errors.New("state: FileStorageConfig.Dir is required")
	}
	if c.JobID != "" {
		if err := ValidJobID(c.JobID); err != nil {
			return err
		}
	}
	return nil
}

// ValidJobID checks that id can name a job's checkpoint place: 1 to 128
// letters, digits, '-', '_' or '.', not starting with '.', and not a name
// of the checkpoint layout ("shared", "chk-N", "savepoint-…", "_…").
func ValidJobID(id string) error {
	bad := func(why string) error { return fmt.Errorf("state: invalid job ID %q: %s", id, why) }
	if id == "" || len(id) > 128 {
		return bad("must be 1 to 128 characters")
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return bad("only letters, digits, '-', '_' and '.' are allowed")
		}
	}
	if _, ok := parseChkDir(id); ok || strings.HasPrefix(id, "chk-") || id == sharedDir || strings.HasPrefix(id, ".") ||
		strings.HasPrefix(id, "_") || strings.HasPrefix(id, "savepoint-") {
		return bad("it is a name of the checkpoint layout")
	}
	return nil
}

// FileStorage is checkpoint storage on a file system:
//
//	<Dir>/<JobID>/chk-<id>/<name>      one file per task state (name unique per task/operator/kind)
//	<Dir>/<JobID>/chk-<id>/_metadata   written last: its presence makes the checkpoint complete
//	<Dir>/<JobID>/shared/<backend>/<id>-<name>   a file of incremental snapshots, uploaded for checkpoint id
//	<Dir>/<JobID>/_lock                locked (flock) while a job runs on the place (Lock)
//
// <Dir>/<JobID> is the job's place (Dir itself without a JobID). Every
// state file starts with its binding header (FileOwner) and its handle
// records its XXH64; the metadata of chk-N must say checkpoint N of the
// storage's job.
//
// Shared files are reference-counted by the checkpoints whose metadata
// refers to them: Discard deletes those of the discarded checkpoint (the
// ones it refers to and the ones uploaded for it) that no other checkpoint
// in the directory refers to. An incremental backend refers only to shared
// files of checkpoints it was told completed, and a checkpoint is discarded
// by retention only once a newer one completed, which refers to every
// shared file the backend still uses; so a shared file a retained
// checkpoint refers to is never deleted.
//
// Every file is written to a temporary name, fsynced, renamed into place and
// its directory fsynced. Handles hold paths relative to the place, and
// every state file's checksum is checked on read.
type FileStorage struct {
	dir string // the job's place
	// root and placed: the root the place is in, and whether dir is
	// root/jobID (else it is root itself); see Location.
	root   string
	placed bool
	jobID  string
	fs     FS
	log    *zap.Logger
}

var _ Storage = (*FileStorage)(nil)

// NewFileStorage returns a FileStorage; it creates Dir if needed.
func NewFileStorage(cfg FileStorageConfig) (*FileStorage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &FileStorage{dir: cfg.Dir, root: cfg.Dir, placed: cfg.JobID != "", jobID: cfg.JobID, fs: cfg.FS, log: cfg.Logger}
	if cfg.JobID != "" {
		s.dir = filepath.Join(cfg.Dir, cfg.JobID)
	}
	if s.fs == nil {
		s.fs = OSFS{}
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if err := s.fs.MkdirAll(s.dir); err != nil {
		return nil, fmt.Errorf("state: create checkpoint storage %s: %w", s.dir, err)
	}
	return s, nil
}

// NewMemoryStorage returns a FileStorage on a fresh MemFS (for tests).
func NewMemoryStorage() *FileStorage {
	s, err := NewFileStorage(FileStorageConfig{Dir: "/checkpoints", FS: NewMemFS()})
	if err != nil {
		panic(err) // MemFS cannot fail to create a directory
	}
	return s
}

// Dir returns the job's place: Dir/JobID, or Dir without a JobID.
func (s *FileStorage) Dir() string { return s.dir }

// Location returns where another process opens this storage (with
// NewFileStorage of the same Dir and JobID); zero if it is not on the
// operating system's file system (a MemFS), where no other process can.
func (s *FileStorage) Location() Location {
	if _, ok := s.fs.(OSFS); !ok {
		return Location{}
	}
	l := Location{Root: s.root}
	if s.placed {
		l.JobID = s.jobID
	}
	return l
}

// JobID returns the storage's job ID (FileStorageConfig.JobID).
func (s *FileStorage) JobID() string { return s.jobID }

// Lock takes the lock of the job's place (an exclusive flock of its
// _lock file on the operating system's file system), so that a second job
// cannot run on the same place at the same time; it fails with ErrLocked
// while another holds it. Closing the result releases it. A lock on a
// network file system is only as good as that file system's flock.
func (s *FileStorage) Lock() (io.Closer, error) {
	p := filepath.Join(s.dir, LockFile)
	l, err := s.fs.Lock(p)
	if errors.Is(err, ErrLocked) {
		return nil, fmt.Errorf("%w: %s is locked (another job with the same job ID and checkpoint directory is running)", ErrLocked, p)
	}
	if err != nil {
		return nil, fmt.Errorf("state: lock %s: %w", p, err)
	}
	return l, nil
}

// FS returns the storage's file system.
func (s *FileStorage) FS() FS { return s.fs }

func chkDir(id barrier.CheckpointID) string { return "chk-" + strconv.FormatUint(uint64(id), 10) }

// parseChkDir parses a checkpoint directory's name, chk-N.
func parseChkDir(name string) (barrier.CheckpointID, bool) {
	v, ok := strings.CutPrefix(name, "chk-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil || id == 0 || strconv.FormatUint(id, 10) != v {
		return 0, false
	}
	return barrier.CheckpointID(id), true
}

func (s *FileStorage) abs(rel string) string { return filepath.Join(s.dir, filepath.FromSlash(rel)) }

func validName(name string) error {
	if name == "" || name == MetadataFile || strings.HasPrefix(name, ".") ||
		strings.ContainsAny(name, `/\`) || len(name) > 200 {
		return fmt.Errorf("state: invalid state file name %q", name)
	}
	return nil
}

// CreateStateWriter creates state file name of checkpoint id, of an empty
// owner (see ForOwner).
func (s *FileStorage) CreateStateWriter(id barrier.CheckpointID, name string) (StateWriter, error) {
	return s.createState(id, FileOwner{}, name)
}

func (s *FileStorage) createState(id barrier.CheckpointID, owner FileOwner, name string) (StateWriter, error) {
	if id == 0 {
		return nil, errors.New("state: checkpoint id 0")
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	return s.createBound(path.Join(chkDir(id), name), FileBinding{JobID: s.jobID, Checkpoint: id, Owner: owner})
}

// createBound starts state file rel with its binding header.
func (s *FileStorage) createBound(rel string, b FileBinding) (*fileWriter, error) {
	hdr, err := AppendFileHeader(nil, b)
	if err != nil {
		return nil, err
	}
	w, err := s.createAtomic(rel)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(hdr); err != nil {
		_ = w.Abort()
		return nil, err
	}
	w.hdr = int64(len(hdr))
	return w, nil
}

// ForOwner returns a factory of state and shared files of owner.
func (s *FileStorage) ForOwner(owner FileOwner) StateWriterFactory {
	return ownedFiles{s: s, owner: owner}
}

type ownedFiles struct {
	s     *FileStorage
	owner FileOwner
}

func (o ownedFiles) CreateStateWriter(id barrier.CheckpointID, name string) (StateWriter, error) {
	return o.s.createState(id, o.owner, name)
}

func (o ownedFiles) CreateSharedStateWriter(id barrier.CheckpointID, backend, name string) (StateWriter, error) {
	return o.s.createShared(id, o.owner, backend, name)
}

// sharedDir is the directory of shared files.
const sharedDir = "shared"

// CreateSharedStateWriter creates shared file name of backend, uploaded for
// checkpoint id (see FileStorage).
func (s *FileStorage) CreateSharedStateWriter(id barrier.CheckpointID, backend, name string) (StateWriter, error) {
	return s.createShared(id, FileOwner{}, backend, name)
}

func (s *FileStorage) createShared(id barrier.CheckpointID, owner FileOwner, backend, name string) (StateWriter, error) {
	if id == 0 {
		return nil, errors.New("state: checkpoint id 0")
	}
	if err := errors.Join(validName(backend), validName(name)); err != nil {
		return nil, err
	}
	return s.createBound(path.Join(sharedDir, backend, fmt.Sprintf("%d-%s", id, name)),
		FileBinding{JobID: s.jobID, Checkpoint: id, Owner: owner})
}

// createAtomic starts writing rel (relative to the root) through a
// temporary file in the same directory.
func (s *FileStorage) createAtomic(rel string) (*fileWriter, error) {
	dir := path.Dir(rel)
	if err := s.fs.MkdirAll(s.abs(dir)); err != nil {
		return nil, fmt.Errorf("state: create %s: %w", dir, err)
	}
	if err := s.fs.SyncDir(s.abs(path.Dir(dir))); err != nil {
		return nil, fmt.Errorf("state: sync %s: %w", path.Dir(dir), err)
	}
	tmp := path.Join(dir, "."+path.Base(rel)+".tmp-"+uuid.NewString())
	f, err := s.fs.Create(s.abs(tmp))
	if err != nil {
		return nil, fmt.Errorf("state: create %s: %w", rel, err)
	}
	return &fileWriter{s: s, f: f, tmp: tmp, rel: rel, sum: xxhash.New()}, nil
}

type fileWriter struct {
	s      *FileStorage
	f      File
	tmp    string
	rel    string
	sum    *xxhash.Digest
	legacy bool // also keep the CRC32C (a copy of a Legacy file)
	crc    uint32
	hdr    int64 // bytes of binding header written first
	n      int64
	err    error
	done   bool
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.done {
		return 0, errors.New("state: write after close")
	}
	n, err := w.f.Write(p)
	_, _ = w.sum.Write(p[:n])
	if w.legacy {
		w.crc = crc32.Update(w.crc, castagnoli, p[:n])
	}
	w.n += int64(n)
	if err != nil {
		w.err = fmt.Errorf("state: write %s: %w", w.rel, err)
	}
	return n, w.err
}

func (w *fileWriter) Close() (StreamHandle, error) {
	if w.done {
		return StreamHandle{}, errors.New("state: writer already closed")
	}
	w.done = true
	err := w.err
	if err == nil {
		if err = w.f.Sync(); err != nil {
			err = fmt.Errorf("state: sync %s: %w", w.rel, err)
		}
	}
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("state: close %s: %w", w.rel, cerr)
	}
	if err == nil {
		if err = w.s.fs.Rename(w.s.abs(w.tmp), w.s.abs(w.rel)); err != nil {
			err = fmt.Errorf("state: rename %s: %w", w.rel, err)
		}
	}
	if err == nil {
		if err = w.s.fs.SyncDir(w.s.abs(path.Dir(w.rel))); err != nil {
			err = fmt.Errorf("state: sync dir of %s: %w", w.rel, err)
		}
	}
	if err != nil {
		w.err = err
		_ = w.s.fs.Remove(w.s.abs(w.tmp))
		return StreamHandle{}, err
	}
	h := StreamHandle{Path: w.rel, Size: w.n - w.hdr, Checksum: w.sum.Sum64()}
	if w.legacy {
		h.Checksum, h.Legacy = uint64(w.crc), true
	}
	return h, nil
}

func (w *fileWriter) Abort() error {
	if !w.done {
		w.done = true
		_ = w.f.Close()
	}
	if err := w.s.fs.Remove(w.s.abs(w.tmp)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func validRel(rel string) error {
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("state: invalid state path %q", rel)
	}
	return nil
}

// OpenState opens a state file and verifies its size and checksum before
// returning it (a mismatch is a *CorruptError); the returned file shows
// the bytes after its binding header.
func (s *FileStorage) OpenState(h StreamHandle) (StateFile, error) {
	f, _, err := s.openVerified(h)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// openVerified opens the file of h, checks its size and checksum and reads
// its binding header (a Legacy file has none).
func (s *FileStorage) openVerified(h StreamHandle) (*stateFile, FileBinding, error) {
	if err := validRel(h.Path); err != nil {
		return nil, FileBinding{}, err
	}
	f, err := s.fs.Open(s.abs(h.Path))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, FileBinding{}, &CorruptError{Path: h.Path, Reason: "missing", Err: err}
		}
		return nil, FileBinding{}, fmt.Errorf("state: open %s: %w", h.Path, err)
	}
	size, err := f.Size()
	if err != nil {
		_ = f.Close()
		return nil, FileBinding{}, fmt.Errorf("state: stat %s: %w", h.Path, err)
	}
	sf, b, err := VerifyStateFile(f, size, h)
	if err != nil {
		_ = f.Close()
		return nil, FileBinding{}, err
	}
	return &stateFile{f: f, ReaderAt: sf, size: sf.Size()}, b, nil
}

// VerifyStateFile checks that r, size bytes, is the state file h
// describes (its size and checksum) and reads its binding header. It
// returns the file's content, the bytes after the header, and the header
// (zero for a Legacy file, which has none). A mismatch is a *CorruptError
// naming h.Path; storages call it on every state file they open.
func VerifyStateFile(r io.ReaderAt, size int64, h StreamHandle) (*io.SectionReader, FileBinding, error) {
	if h.Legacy {
		if size != h.Size {
			return nil, FileBinding{}, &CorruptError{Path: h.Path, Reason: fmt.Sprintf("size %d, expected %d (truncated?)", size, h.Size)}
		}
		crc := crc32.New(castagnoli)
		if _, err := io.Copy(crc, io.NewSectionReader(r, 0, size)); err != nil {
			return nil, FileBinding{}, fmt.Errorf("state: read %s: %w", h.Path, err)
		}
		if got := uint64(crc.Sum32()); got != h.Checksum {
			return nil, FileBinding{}, &CorruptError{Path: h.Path, Reason: fmt.Sprintf("checksum %08x, expected %08x", got, h.Checksum)}
		}
		return io.NewSectionReader(r, 0, size), FileBinding{}, nil
	}
	b, hdr, herr := ReadFileHeader(r, size)
	// what the header says, for an error about a file that does not verify
	says := func() string {
		if herr != nil {
			return ""
		}
		return "; its header says it belongs to " + b.String()
	}
	if herr == nil && size-hdr != h.Size {
		return nil, FileBinding{}, &CorruptError{Path: h.Path, Reason: fmt.Sprintf("size %d, expected %d (truncated?)%s", size-hdr, h.Size, says())}
	}
	sum := xxhash.New()
	if _, err := io.Copy(sum, io.NewSectionReader(r, 0, size)); err != nil {
		return nil, FileBinding{}, fmt.Errorf("state: read %s: %w", h.Path, err)
	}
	if got := sum.Sum64(); got != h.Checksum {
		return nil, FileBinding{}, &CorruptError{Path: h.Path, Reason: fmt.Sprintf("checksum %016x, expected %016x%s", got, h.Checksum, says())}
	}
	if herr != nil {
		return nil, FileBinding{}, &CorruptError{Path: h.Path, Reason: "file header", Err: herr}
	}
	return io.NewSectionReader(r, hdr, size-hdr), b, nil
}

// stateFile is a verified state file: the bytes after its header.
type stateFile struct {
	io.ReaderAt
	f    File
	size int64
}

func (f *stateFile) Close() error { return f.f.Close() }

func (f *stateFile) Size() int64 { return f.size }

// VerifyState checks that the file of h exists and matches its size and
// checksum.
func (s *FileStorage) VerifyState(h StreamHandle) error {
	f, err := s.OpenState(h)
	if err != nil {
		return err
	}
	return f.Close()
}

// Verify checks every state file of m: its size, its checksum, and that
// its binding header names m's job and checkpoint (a shared file: this or
// an earlier checkpoint) and the task and operator m files it under.
func (s *FileStorage) Verify(m Metadata) error {
	return VerifyMetadataFiles(m, func(h StreamHandle) (FileBinding, error) {
		f, b, err := s.openVerified(h)
		if err != nil {
			return FileBinding{}, err
		}
		return b, f.Close()
	})
}

// VerifyMetadataFiles checks every state file of m with open (which
// verifies one file and returns its binding header) and compares each
// header with where m files the state.
func VerifyMetadataFiles(m Metadata, open func(StreamHandle) (FileBinding, error)) error {
	for _, h := range m.boundHandles() {
		b, err := open(h.StreamHandle)
		if err != nil {
			return err
		}
		if h.Legacy {
			continue
		}
		if err := checkBinding(m, h, b); err != nil {
			return err
		}
	}
	return nil
}

// WriteMetadata writes chk-<id>/_metadata durably (temp file, fsync,
// rename, fsync of the directory), completing checkpoint m.ID.
func (s *FileStorage) WriteMetadata(m Metadata) error {
	if m.ID == 0 {
		return errors.New("state: metadata with checkpoint id 0")
	}
	m.JobID = s.jobID
	return s.writeFile(path.Join(chkDir(m.ID), MetadataFile), EncodeMetadata(m))
}

func (s *FileStorage) writeFile(rel string, data []byte) error {
	w, err := s.createAtomic(rel)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Abort()
		return err
	}
	_, err = w.Close()
	return err
}

// ReadMetadata reads and verifies chk-<id>/_metadata: it must describe
// checkpoint id of the storage's job (metadata of another checkpoint, as
// an older one's copied over it, is a *CorruptError).
func (s *FileStorage) ReadMetadata(id barrier.CheckpointID) (Metadata, error) {
	rel := path.Join(chkDir(id), MetadataFile)
	m, err := s.readMetadata(rel)
	if err != nil {
		return Metadata{}, err
	}
	if err := CheckMetadataPlace(m, id, s.jobID, rel); err != nil {
		return Metadata{}, err
	}
	return m, nil
}

// CheckMetadataPlace checks that m, read from path, is the metadata of
// checkpoint id of job jobID (of any job if jobID is empty): a mismatch is
// a *CorruptError.
func CheckMetadataPlace(m Metadata, id barrier.CheckpointID, jobID, path string) error {
	if m.ID != id {
		return &CorruptError{Path: path, Reason: fmt.Sprintf("it is the metadata of checkpoint %d, not of checkpoint %d (a stale copy?)", m.ID, id)}
	}
	if jobID != "" && m.JobID != jobID {
		return &CorruptError{Path: path, Reason: fmt.Sprintf("it is the metadata of job %q, not of job %q", m.JobID, jobID)}
	}
	return nil
}

func (s *FileStorage) readMetadata(rel string) (Metadata, error) {
	f, err := s.fs.Open(s.abs(rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Metadata{}, fmt.Errorf("%w: %s", ErrNotFound, rel)
		}
		return Metadata{}, fmt.Errorf("state: open %s: %w", rel, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return Metadata{}, fmt.Errorf("state: read %s: %w", rel, err)
	}
	m, err := DecodeMetadata(b)
	if err != nil {
		return Metadata{}, &CorruptError{Path: rel, Reason: "metadata", Err: err}
	}
	return m, nil
}

// Discard removes chk-<id> and everything in it, and the shared files
// only it referred to or that were uploaded for it and no other checkpoint
// refers to. A missing checkpoint is no error.
func (s *FileStorage) Discard(id barrier.CheckpointID) error {
	// The shared files this checkpoint may hold the last reference to.
	candidates := map[string]bool{}
	m, err := s.ReadMetadata(id)
	switch {
	case err == nil:
		for _, h := range m.sharedHandles() {
			candidates[h.Path] = true
		}
	case errors.Is(err, ErrNotFound):
	default:
		// A corrupt metadata file is restored by nobody: its references
		// count for nothing.
		s.log.Warn("discarding a checkpoint whose metadata does not read", zap.Uint64("checkpoint", uint64(id)), zap.Error(err))
	}
	if err := s.uploadedFor(id, candidates); err != nil {
		return fmt.Errorf("state: discard checkpoint %d: %w", id, err)
	}
	if err := s.fs.RemoveAll(s.abs(chkDir(id))); err != nil {
		return fmt.Errorf("state: discard checkpoint %d: %w", id, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("state: discard checkpoint %d: sync: %w", id, err)
	}
	if len(candidates) == 0 {
		return nil
	}
	if err := s.unreferenced(candidates); err != nil {
		return fmt.Errorf("state: discard checkpoint %d: shared files: %w", id, err)
	}
	for p := range candidates {
		if err := s.fs.Remove(s.abs(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("state: discard checkpoint %d: %w", id, err)
		}
	}
	return nil
}

// uploadedFor adds the shared files uploaded for checkpoint id to set.
func (s *FileStorage) uploadedFor(id barrier.CheckpointID, set map[string]bool) error {
	backends, err := s.fs.ReadDir(s.abs(sharedDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	prefix := strconv.FormatUint(uint64(id), 10) + "-"
	for _, b := range backends {
		names, err := s.fs.ReadDir(s.abs(path.Join(sharedDir, b)))
		if err != nil {
			return err
		}
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				set[path.Join(sharedDir, b, n)] = true
			}
		}
	}
	return nil
}

// unreferenced removes from set the shared files the metadata of any
// checkpoint in the directory refers to.
func (s *FileStorage) unreferenced(set map[string]bool) error {
	ids, err := s.Checkpoints()
	if err != nil {
		return err
	}
	for _, id := range ids {
		m, err := s.ReadMetadata(id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		var ce *CorruptError
		if errors.As(err, &ce) {
			continue // restored by nobody
		}
		if err != nil {
			return err // keep everything rather than guess
		}
		for _, h := range m.sharedHandles() {
			delete(set, h.Path)
		}
	}
	return nil
}

// Checkpoints lists the ids of the checkpoint directories, newest first
// (complete or not).
func (s *FileStorage) Checkpoints() ([]barrier.CheckpointID, error) {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("state: list %s: %w", s.dir, err)
	}
	var ids []barrier.CheckpointID
	for _, n := range names {
		if id, ok := parseChkDir(n); ok {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] })
	return ids, nil
}

// Latest returns the newest completed checkpoint whose metadata and state
// files all verify. Each completed checkpoint that fails verification is
// logged and skipped; checkpoints without metadata (in progress or
// abandoned) are skipped silently. It returns ErrNotFound if none is usable.
func (s *FileStorage) Latest() (Metadata, error) {
	ids, err := s.Checkpoints()
	if err != nil {
		return Metadata{}, err
	}
	for _, id := range ids {
		m, err := s.ReadMetadata(id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err == nil {
			err = s.Verify(m)
		}
		if err != nil {
			s.log.Error("skipping corrupt checkpoint; falling back to an older one",
				zap.Uint64("checkpoint", uint64(id)), zap.String("dir", s.dir), zap.Error(err))
			continue
		}
		return m, nil
	}
	return Metadata{}, fmt.Errorf("%w: no valid completed checkpoint in %s", ErrNotFound, s.dir)
}

// ExportSavepoint copies m's state files and metadata into a new directory
// dir/savepoint-<id>-<random>, verifying each file on the way. The directory
// is assembled under a temporary name and renamed into place, so it either
// exists complete or not at all. Handle paths in its metadata are relative
// to the savepoint directory, which makes it relocatable.
func (s *FileStorage) ExportSavepoint(m Metadata, dir string) (string, error) {
	name := fmt.Sprintf("savepoint-%d-%s", m.ID, uuid.NewString()[:8])
	tmp := filepath.Join(dir, "."+name+".tmp")
	final := filepath.Join(dir, name)
	if err := s.fs.MkdirAll(tmp); err != nil {
		return "", fmt.Errorf("state: export savepoint: %w", err)
	}
	if s.jobID != "" {
		m.JobID = s.jobID // its files say so
	}
	sp := &FileStorage{dir: tmp, root: tmp, jobID: m.JobID, fs: s.fs, log: s.log}
	ok := false
	defer func() {
		if !ok {
			_ = s.fs.RemoveAll(tmp)
		}
	}()
	used := map[string]bool{MetadataFile: true}
	out := m.Clone()
	var err error
	out.rewriteHandles(func(h *StreamHandle) {
		if err != nil {
			return
		}
		base := path.Base(h.Path)
		for i := 1; used[base]; i++ {
			base = fmt.Sprintf("%d-%s", i, path.Base(h.Path))
		}
		used[base] = true
		err = s.copyState(sp, *h, base)
		h.Path = base
	})
	if err != nil {
		return "", fmt.Errorf("state: export savepoint %d: %w", m.ID, err)
	}
	if err := sp.writeFile(MetadataFile, EncodeMetadata(out)); err != nil {
		return "", fmt.Errorf("state: export savepoint %d: %w", m.ID, err)
	}
	if err := s.fs.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("state: export savepoint %d: %w", m.ID, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return "", fmt.Errorf("state: export savepoint %d: %w", m.ID, err)
	}
	ok = true
	return final, nil
}

// copyState copies the file of h byte for byte (binding header included)
// to dst's file name, checking on the way that it is the file h describes.
func (s *FileStorage) copyState(dst *FileStorage, h StreamHandle, name string) error {
	if err := validRel(h.Path); err != nil {
		return err
	}
	f, err := s.fs.Open(s.abs(h.Path))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &CorruptError{Path: h.Path, Reason: "missing", Err: err}
		}
		return fmt.Errorf("state: open %s: %w", h.Path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("state: stat %s: %w", h.Path, err)
	}
	w, err := dst.createAtomic(name)
	if err != nil {
		return err
	}
	w.legacy = h.Legacy
	if _, err := io.Copy(w, io.NewSectionReader(f, 0, size)); err != nil {
		_ = w.Abort()
		return err
	}
	nh, err := w.Close()
	if err != nil {
		return err
	}
	if nh.Checksum != h.Checksum {
		return &CorruptError{Path: h.Path, Reason: fmt.Sprintf("checksum %016x, expected %016x", nh.Checksum, h.Checksum)}
	}
	return nil
}

// OpenSavepoint opens the savepoint directory p (on this storage's file
// system) and returns its metadata and a FileStorage rooted at it, whose
// OpenState reads the savepoint's state files. All files are verified.
func (s *FileStorage) OpenSavepoint(p string) (Metadata, Storage, error) {
	sp := &FileStorage{dir: p, root: p, fs: s.fs, log: s.log}
	m, err := sp.readMetadata(MetadataFile)
	if err != nil {
		return Metadata{}, nil, err
	}
	sp.jobID = m.JobID
	if err := sp.Verify(m); err != nil {
		return Metadata{}, nil, err
	}
	return m, sp, nil
}

// OpenSavepoint opens a savepoint directory on the operating system's file
// system (see FileStorage.OpenSavepoint).
func OpenSavepoint(p string, logger *zap.Logger) (Metadata, Storage, error) {
	s := &FileStorage{dir: p, root: p, fs: OSFS{}, log: logger}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	return s.OpenSavepoint(p)
}
