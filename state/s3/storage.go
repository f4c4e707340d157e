package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
)

// Storage is checkpoint storage on the S3 API (see the package doc). It
// is safe for concurrent use.
type Storage struct {
	cfg    Config
	client *minio.Client
	core   minio.Core
	// transport, if the storage made it, is closed by Close.
	transport *http.Transport
	bucket    string
	// root is the checkpoint root as a URL (s3://bucket/prefix); place
	// the key prefix of the job's place ("" or ending in "/").
	root   string
	place  string
	jobID  string
	placed bool // place is root/jobID (else root itself)
	log    *zap.Logger

	mu struct {
		sync.Mutex
		// shared lists the shared files each checkpoint's metadata
		// refers to, once written or read (metadata is written once).
		shared map[barrier.CheckpointID][]string
	}
}

var _ state.Storage = (*Storage)(nil)

// New checks cfg, connects to the endpoint, checks that the bucket exists
// and that the credentials are accepted, and returns the storage of job
// cfg.JobID. ctx bounds the check.
func New(ctx context.Context, cfg Config) (*Storage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Storage{cfg: cfg, bucket: cfg.Bucket, jobID: cfg.JobID, placed: cfg.JobID != "", log: cfg.Logger}
	s.root = Scheme + cfg.Bucket
	if cfg.Prefix != "" {
		s.root += "/" + cfg.Prefix
	}
	if s.place = joinKey(cfg.Prefix, cfg.JobID); s.place != "" {
		s.place += "/"
	}
	client, tr, err := cfg.client()
	if err != nil {
		return nil, err
	}
	s.transport = tr
	s.client, s.core = client, minio.Core{Client: client}
	s.mu.shared = map[barrier.CheckpointID][]string{}
	if err := s.checkBucket(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Client returns a client of cfg's endpoint with its credentials (the
// standard chain if it has none), for other users of the same object
// storage (the Parquet sink's s3:// output), and the transport it made
// (nil if cfg has one), whose idle connections the caller closes when
// done. It checks nothing on the network.
func (c Config) Client() (*minio.Client, *http.Transport, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	return c.withDefaults().client()
}

func (c Config) client() (*minio.Client, *http.Transport, error) {
	host, secure, lookup := "s3.amazonaws.com", true, minio.BucketLookupAuto
	if c.Endpoint != "" {
		host, secure, _ = parseEndpoint(c.Endpoint)
		lookup = minio.BucketLookupPath
	}
	var creds *credentials.Credentials
	if c.AccessKeyID != "" {
		creds = credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
		})
	}
	var made *http.Transport
	rt := c.Transport
	if rt == nil {
		tr, err := minio.DefaultTransport(secure)
		if err != nil {
			return nil, nil, fmt.Errorf("s3: %w", err)
		}
		made, rt = tr, tr
	}
	client, err := minio.New(host, &minio.Options{Creds: creds, Secure: secure, Region: c.Region,
		BucketLookup: lookup, Transport: rt, MaxRetries: c.MaxRetries + 1})
	if err != nil {
		if made != nil {
			made.CloseIdleConnections()
		}
		return nil, nil, fmt.Errorf("s3: endpoint %s: %w", host, err)
	}
	return client, made, nil
}

// checkBucket checks that the bucket exists and the credentials work.
func (s *Storage) checkBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return s.describe(fmt.Errorf("s3: bucket %q at %s: %w", s.bucket, s.client.EndpointURL().Host, err))
	}
	if !ok {
		return fmt.Errorf("s3: bucket %q does not exist at %s", s.bucket, s.client.EndpointURL().Host)
	}
	// BucketExists may pass anonymously on a public bucket: a listing of
	// the place checks that the credentials are accepted.
	if _, err := s.core.ListObjectsV2(s.bucket, s.place, "", "", "/", 1); err != nil {
		return s.describe(fmt.Errorf("s3: list %s: %w", s.url(s.place), err))
	}
	return nil
}

// describe adds a hint to the errors a user can fix.
func (s *Storage) describe(err error) error {
	var er minio.ErrorResponse
	if !errors.As(err, &er) {
		return err
	}
	switch er.Code {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken":
		return fmt.Errorf("%w (the credentials were refused: check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or the bucket's policy)", err)
	case "NoSuchBucket":
		return fmt.Errorf("%w (the bucket does not exist)", err)
	}
	return err
}

// Close releases the storage's idle connections. The storage must not be
// used after.
func (s *Storage) Close() error {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	return nil
}

// Location returns where another process opens this storage: its root
// URL and job ID (credentials come from that process's environment).
func (s *Storage) Location() state.Location {
	l := state.Location{Root: s.root}
	if s.placed {
		l.JobID = s.jobID
	}
	return l
}

// JobID returns the storage's job ID.
func (s *Storage) JobID() string { return s.jobID }

func joinKey(parts ...string) string {
	var nonEmpty []string
	for _, p := range parts {
		if p = strings.Trim(p, "/"); p != "" {
			nonEmpty = append(nonEmpty, p)
		}
	}
	return strings.Join(nonEmpty, "/")
}

func (s *Storage) url(key string) string { return Scheme + s.bucket + "/" + key }

func (s *Storage) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
}

func chkDir(id barrier.CheckpointID) string { return "chk-" + strconv.FormatUint(uint64(id), 10) }

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

const sharedDir = "shared"

func validName(name string) error {
	if name == "" || name == state.MetadataFile || strings.HasPrefix(name, ".") ||
		strings.ContainsAny(name, `/\`) || len(name) > 200 {
		return fmt.Errorf("s3: invalid state file name %q", name)
	}
	return nil
}

func validRel(rel string) error {
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("s3: invalid state path %q", rel)
	}
	return nil
}

func isNotFound(err error) bool {
	var er minio.ErrorResponse
	return errors.As(err, &er) && (er.Code == "NoSuchKey" || er.Code == "NotFound")
}

// CreateStateWriter creates state file name of checkpoint id, of an empty
// owner (see ForOwner).
func (s *Storage) CreateStateWriter(id barrier.CheckpointID, name string) (state.StateWriter, error) {
	return s.createState(id, state.FileOwner{}, name)
}

// CreateSharedStateWriter creates shared file name of backend, uploaded for
// checkpoint id.
func (s *Storage) CreateSharedStateWriter(id barrier.CheckpointID, backend, name string) (state.StateWriter, error) {
	return s.createShared(id, state.FileOwner{}, backend, name)
}

// ForOwner returns a factory of state and shared files of owner.
func (s *Storage) ForOwner(owner state.FileOwner) state.StateWriterFactory {
	return ownedFiles{s: s, owner: owner}
}

type ownedFiles struct {
	s     *Storage
	owner state.FileOwner
}

func (o ownedFiles) CreateStateWriter(id barrier.CheckpointID, name string) (state.StateWriter, error) {
	return o.s.createState(id, o.owner, name)
}

func (o ownedFiles) CreateSharedStateWriter(id barrier.CheckpointID, backend, name string) (state.StateWriter, error) {
	return o.s.createShared(id, o.owner, backend, name)
}

func (s *Storage) createState(id barrier.CheckpointID, owner state.FileOwner, name string) (state.StateWriter, error) {
	if id == 0 {
		return nil, errors.New("s3: checkpoint id 0")
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	return s.createBound(path.Join(chkDir(id), name), state.FileBinding{JobID: s.jobID, Checkpoint: id, Owner: owner})
}

func (s *Storage) createShared(id barrier.CheckpointID, owner state.FileOwner, backend, name string) (state.StateWriter, error) {
	if id == 0 {
		return nil, errors.New("s3: checkpoint id 0")
	}
	if err := errors.Join(validName(backend), validName(name)); err != nil {
		return nil, err
	}
	return s.createBound(path.Join(sharedDir, backend, fmt.Sprintf("%d-%s", id, name)),
		state.FileBinding{JobID: s.jobID, Checkpoint: id, Owner: owner})
}

func (s *Storage) createBound(rel string, b state.FileBinding) (*writer, error) {
	hdr, err := state.AppendFileHeader(nil, b)
	if err != nil {
		return nil, err
	}
	w := s.newWriter(rel)
	if _, err := w.Write(hdr); err != nil {
		_ = w.Abort()
		return nil, err
	}
	w.hdr = int64(len(hdr))
	return w, nil
}

// OpenState opens a state file and verifies its size and checksum before
// returning it (a mismatch or a missing object is a *state.CorruptError);
// the returned file shows the bytes after its binding header, read by
// ranged GETs.
func (s *Storage) OpenState(h state.StreamHandle) (state.StateFile, error) {
	f, _, err := s.openVerified(h)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// VerifyState checks that the object of h exists and matches its size and
// checksum.
func (s *Storage) VerifyState(h state.StreamHandle) error {
	_, _, err := s.openVerified(h)
	return err
}

func (s *Storage) openVerified(h state.StreamHandle) (*stateFile, state.FileBinding, error) {
	if err := validRel(h.Path); err != nil {
		return nil, state.FileBinding{}, err
	}
	key := s.place + h.Path
	ctx, cancel := s.ctx()
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	cancel()
	if err != nil {
		if isNotFound(err) {
			return nil, state.FileBinding{}, &state.CorruptError{Path: s.url(key), Reason: "missing", Err: err}
		}
		return nil, state.FileBinding{}, fmt.Errorf("s3: stat %s: %w", s.url(key), err)
	}
	o := &object{s: s, key: key, size: info.Size}
	sr, b, err := state.VerifyStateFile(o, info.Size, h)
	if err != nil {
		var ce *state.CorruptError
		if errors.As(err, &ce) {
			ce.Path = s.url(key)
		}
		return nil, state.FileBinding{}, err
	}
	o.drop() // the checksum pass read it all; reads start afresh
	return &stateFile{ReaderAt: sr, size: sr.Size()}, b, nil
}

// stateFile is a verified state object: the bytes after its header.
type stateFile struct {
	io.ReaderAt
	size int64
}

func (f *stateFile) Close() error { return nil }

func (f *stateFile) Size() int64 { return f.size }

// Verify checks every state file of m: its size, its checksum, and that
// its binding header names m's job and checkpoint and the task and
// operator m files it under.
func (s *Storage) Verify(m state.Metadata) error {
	return state.VerifyMetadataFiles(m, func(h state.StreamHandle) (state.FileBinding, error) {
		_, b, err := s.openVerified(h)
		return b, err
	})
}

// WriteMetadata writes chk-<id>/_metadata, completing checkpoint m.ID. The
// object is written once: if it exists (a second job on the same place),
// the write fails.
func (s *Storage) WriteMetadata(m state.Metadata) error {
	if m.ID == 0 {
		return errors.New("s3: metadata with checkpoint id 0")
	}
	m.JobID = s.jobID
	key := s.place + path.Join(chkDir(m.ID), state.MetadataFile)
	if err := s.putOnce(key, state.EncodeMetadata(m)); err != nil {
		return err
	}
	s.remember(m)
	return nil
}

// putOnce writes a small object that must not exist yet.
func (s *Storage) putOnce(key string, data []byte) error {
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream"}
	opts.SetMatchETagExcept("*")
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), "", "", opts)
	if err == nil {
		return nil
	}
	if er := (minio.ErrorResponse{}); errors.As(err, &er) && er.Code == "PreconditionFailed" {
		return fmt.Errorf("s3: %s exists already (another job writing the same place? S3 has no lock: give each job its own job ID, or run it with high availability): %w", s.url(key), err)
	}
	return fmt.Errorf("s3: put %s: %w", s.url(key), s.describe(err))
}

// remember caches the shared files m refers to.
func (s *Storage) remember(m state.Metadata) {
	var paths []string
	for _, h := range m.SharedHandles() {
		paths = append(paths, h.Path)
	}
	s.mu.Lock()
	s.mu.shared[m.ID] = paths
	s.mu.Unlock()
}

func (s *Storage) forget(id barrier.CheckpointID) {
	s.mu.Lock()
	delete(s.mu.shared, id)
	s.mu.Unlock()
}

// ReadMetadata reads and verifies chk-<id>/_metadata: it must describe
// checkpoint id of the storage's job (state.ErrNotFound if it does not
// exist, *state.CorruptError if it does not verify).
func (s *Storage) ReadMetadata(id barrier.CheckpointID) (state.Metadata, error) {
	key := s.place + path.Join(chkDir(id), state.MetadataFile)
	m, err := s.readMetadata(key)
	if err != nil {
		return state.Metadata{}, err
	}
	if err := state.CheckMetadataPlace(m, id, s.jobID, s.url(key)); err != nil {
		return state.Metadata{}, err
	}
	s.remember(m)
	return m, nil
}

func (s *Storage) readMetadata(key string) (state.Metadata, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	rc, _, _, err := s.core.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		if isNotFound(err) {
			return state.Metadata{}, fmt.Errorf("%w: %s", state.ErrNotFound, s.url(key))
		}
		return state.Metadata{}, fmt.Errorf("s3: get %s: %w", s.url(key), s.describe(err))
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return state.Metadata{}, fmt.Errorf("s3: read %s: %w", s.url(key), err)
	}
	m, err := state.DecodeMetadata(b)
	if err != nil {
		return state.Metadata{}, &state.CorruptError{Path: s.url(key), Reason: "metadata", Err: err}
	}
	return m, nil
}

// list returns the keys under prefix (recursive) or the names of its
// immediate children, "directories" with a trailing slash (delimited).
func (s *Storage) list(prefix string, delimited bool) ([]string, error) {
	delim := ""
	if delimited {
		delim = "/"
	}
	var out []string
	token := ""
	for {
		res, err := s.core.ListObjectsV2(s.bucket, prefix, "", token, delim, 1000)
		if err != nil {
			return nil, fmt.Errorf("s3: list %s: %w", s.url(prefix), s.describe(err))
		}
		for _, o := range res.Contents {
			out = append(out, strings.TrimPrefix(o.Key, prefix))
		}
		for _, p := range res.CommonPrefixes {
			out = append(out, strings.TrimPrefix(p.Prefix, prefix))
		}
		if !res.IsTruncated || res.NextContinuationToken == "" {
			return out, nil
		}
		token = res.NextContinuationToken
	}
}

// Checkpoints lists the IDs of the checkpoints in the job's place (one
// delimited listing), newest first, complete or not.
func (s *Storage) Checkpoints() ([]barrier.CheckpointID, error) {
	names, err := s.list(s.place, true)
	if err != nil {
		return nil, err
	}
	var ids []barrier.CheckpointID
	for _, n := range names {
		if id, ok := parseChkDir(strings.TrimSuffix(n, "/")); ok && strings.HasSuffix(n, "/") {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] })
	return ids, nil
}

// Places lists the job places with checkpoints under the storage's place,
// read as a checkpoint root (a storage opened without a job ID): each
// job's prefix, and the root itself if it holds checkpoints directly. It
// costs one delimited listing of the root and one per job prefix.
func (s *Storage) Places() ([]state.Place, error) {
	names, err := s.list(s.place, true)
	if err != nil {
		return nil, err
	}
	newest := func(names []string) barrier.CheckpointID {
		var n barrier.CheckpointID
		for _, name := range names {
			if id, ok := parseChkDir(strings.TrimSuffix(name, "/")); ok && strings.HasSuffix(name, "/") {
				n = max(n, id)
			}
		}
		return n
	}
	var places []state.Place
	if n := newest(names); n > 0 {
		places = append(places, state.Place{Newest: n})
	}
	for _, name := range names {
		job, ok := strings.CutSuffix(name, "/")
		if !ok || state.ValidJobID(job) != nil {
			continue
		}
		sub, err := s.list(s.place+name, true)
		if err != nil {
			return nil, err
		}
		if n := newest(sub); n > 0 {
			places = append(places, state.Place{JobID: job, Newest: n})
		}
	}
	return places, nil
}

// Latest returns the newest completed checkpoint whose metadata and state
// files all verify; a completed checkpoint that does not is logged and
// skipped. state.ErrNotFound if none is usable.
func (s *Storage) Latest() (state.Metadata, error) {
	ids, err := s.Checkpoints()
	if err != nil {
		return state.Metadata{}, err
	}
	for _, id := range ids {
		m, err := s.ReadMetadata(id)
		if errors.Is(err, state.ErrNotFound) {
			continue
		}
		if err == nil {
			err = s.Verify(m)
		}
		if err != nil {
			s.log.Error("skipping corrupt checkpoint; falling back to an older one",
				zap.Uint64("checkpoint", uint64(id)), zap.String("place", s.url(s.place)), zap.Error(err))
			continue
		}
		return m, nil
	}
	return state.Metadata{}, fmt.Errorf("%w: no valid completed checkpoint in %s", state.ErrNotFound, s.url(s.place))
}

// Discard removes checkpoint id: its metadata first (it is no longer
// complete), then its files, then the shared files uploaded for it or
// referred to by it that no remaining checkpoint refers to. A missing
// checkpoint is no error.
func (s *Storage) Discard(id barrier.CheckpointID) error {
	fail := func(err error) error { return fmt.Errorf("s3: discard checkpoint %d: %w", id, err) }
	candidates := map[string]bool{}
	m, err := s.ReadMetadata(id)
	switch {
	case err == nil:
		for _, h := range m.SharedHandles() {
			candidates[h.Path] = true
		}
	case errors.Is(err, state.ErrNotFound):
	default:
		s.log.Warn("discarding a checkpoint whose metadata does not read", zap.Uint64("checkpoint", uint64(id)), zap.Error(err))
	}
	if err := s.uploadedFor(id, candidates); err != nil {
		return fail(err)
	}
	dir := s.place + chkDir(id) + "/"
	if err := s.remove(dir + state.MetadataFile); err != nil {
		return fail(err)
	}
	s.forget(id)
	files, err := s.list(dir, false)
	if err != nil {
		return fail(err)
	}
	for _, f := range files {
		if err := s.remove(dir + f); err != nil {
			return fail(err)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	if err := s.unreferenced(id, candidates); err != nil {
		return fail(fmt.Errorf("shared files: %w", err))
	}
	for p := range candidates {
		if err := s.remove(s.place + p); err != nil {
			return fail(err)
		}
	}
	return nil
}

func (s *Storage) remove(key string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", s.url(key), s.describe(err))
	}
	return nil
}

// uploadedFor adds the shared files uploaded for checkpoint id to set:
// one delimited listing of the backends, one listing of each backend's
// files of id.
func (s *Storage) uploadedFor(id barrier.CheckpointID, set map[string]bool) error {
	shared := s.place + sharedDir + "/"
	backends, err := s.list(shared, true)
	if err != nil {
		return err
	}
	prefix := strconv.FormatUint(uint64(id), 10) + "-"
	for _, b := range backends {
		if !strings.HasSuffix(b, "/") {
			continue
		}
		names, err := s.list(shared+b+prefix, false)
		if err != nil {
			return err
		}
		for _, n := range names {
			set[sharedDir+"/"+b+prefix+n] = true
		}
	}
	return nil
}

// unreferenced removes from set the shared files that the metadata of a
// checkpoint other than id refers to.
func (s *Storage) unreferenced(id barrier.CheckpointID, set map[string]bool) error {
	ids, err := s.Checkpoints()
	if err != nil {
		return err
	}
	for _, other := range ids {
		if other == id {
			continue
		}
		s.mu.Lock()
		paths, ok := s.mu.shared[other]
		s.mu.Unlock()
		if !ok {
			m, err := s.ReadMetadata(other)
			var ce *state.CorruptError
			switch {
			case errors.Is(err, state.ErrNotFound), errors.As(err, &ce):
				continue // in progress, or restored by nobody
			case err != nil:
				return err // keep everything rather than guess
			}
			for _, h := range m.SharedHandles() {
				paths = append(paths, h.Path)
			}
		}
		for _, p := range paths {
			delete(set, p)
		}
	}
	return nil
}

// ExportSavepoint copies m's state files into a new place
// dir/savepoint-<id>-<random>/ (dir is an s3:// URL on this storage's
// endpoint), verifying each file's checksum on the way, and writes its
// metadata last: the savepoint exists once that object does. Handle paths
// in its metadata are relative to the savepoint's place.
func (s *Storage) ExportSavepoint(m state.Metadata, dir string) (string, error) {
	fail := func(err error) (string, error) { return "", fmt.Errorf("s3: export savepoint %d: %w", m.ID, err) }
	bucket, prefix, err := ParseURL(dir)
	if err != nil {
		return fail(fmt.Errorf("the target of a savepoint of checkpoints on S3 must be an s3:// URL: %w", err))
	}
	name := fmt.Sprintf("savepoint-%d-%s", m.ID, uuid.NewString()[:8])
	sp := s.sub(bucket, joinKey(prefix, name), m.JobID)
	if s.jobID != "" {
		sp.jobID = s.jobID
	}
	used := map[string]bool{state.MetadataFile: true}
	var written []string
	ok := false
	defer func() {
		if !ok {
			for _, k := range written {
				_ = sp.remove(k)
			}
		}
	}()
	var cerr error
	out := m.WithHandles(func(h state.StreamHandle) state.StreamHandle {
		if cerr != nil {
			return h
		}
		base := path.Base(h.Path)
		for i := 1; used[base]; i++ {
			base = fmt.Sprintf("%d-%s", i, path.Base(h.Path))
		}
		used[base] = true
		cerr = s.copyState(sp, h, base)
		written = append(written, sp.place+base)
		h.Path = base
		return h
	})
	if cerr != nil {
		return fail(cerr)
	}
	out.JobID = sp.jobID
	if err := sp.putOnce(sp.place+state.MetadataFile, state.EncodeMetadata(out)); err != nil {
		return fail(err)
	}
	ok = true
	return strings.TrimSuffix(sp.url(sp.place), "/"), nil
}

// sub returns a storage on the same client whose place is key prefix
// place of bucket, itself (a savepoint).
func (s *Storage) sub(bucket, place, jobID string) *Storage {
	sp := &Storage{cfg: s.cfg, client: s.client, core: s.core, bucket: bucket, jobID: jobID, log: s.log}
	sp.root = Scheme + bucket
	if place != "" {
		sp.root += "/" + place
		sp.place = place + "/"
	}
	sp.mu.shared = map[barrier.CheckpointID][]string{}
	return sp
}

// copyState streams the object of h (binding header included) to dst's
// object name, checking its size and checksum on the way.
func (s *Storage) copyState(dst *Storage, h state.StreamHandle, name string) error {
	if err := validRel(h.Path); err != nil {
		return err
	}
	if h.Legacy {
		return fmt.Errorf("s3: %s is a file of weir before metadata version 4, which object storage does not hold", h.Path)
	}
	key := s.place + h.Path
	ctx, cancel := s.ctx()
	defer cancel()
	rc, _, _, err := s.core.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		if isNotFound(err) {
			return &state.CorruptError{Path: s.url(key), Reason: "missing", Err: err}
		}
		return fmt.Errorf("s3: get %s: %w", s.url(key), s.describe(err))
	}
	defer rc.Close()
	w := dst.newWriter(name)
	if _, err := io.Copy(w, rc); err != nil {
		_ = w.Abort()
		return fmt.Errorf("s3: copy %s: %w", s.url(key), err)
	}
	if w.sum.Sum64() != h.Checksum {
		_ = w.Abort()
		return &state.CorruptError{Path: s.url(key), Reason: fmt.Sprintf("checksum %016x, expected %016x", w.sum.Sum64(), h.Checksum)}
	}
	if _, err := w.Close(); err != nil {
		return err
	}
	return nil
}

// OpenSavepoint opens the savepoint at p, an s3:// URL written by
// ExportSavepoint, and returns its metadata and a storage that reads its
// state files. All files are verified.
func (s *Storage) OpenSavepoint(p string) (state.Metadata, state.Storage, error) {
	bucket, prefix, err := ParseURL(p)
	if err != nil {
		return state.Metadata{}, nil, err
	}
	sp := s.sub(bucket, prefix, "")
	m, err := sp.readMetadata(sp.place + state.MetadataFile)
	if err != nil {
		return state.Metadata{}, nil, err
	}
	sp.jobID = m.JobID
	if err := sp.Verify(m); err != nil {
		return state.Metadata{}, nil, err
	}
	return m, sp, nil
}
