package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/s3"
)

// located is checkpoint storage that another process can open: its
// Location names it (state.FileStorage on the operating system's file
// system, s3.Storage). A job across processes needs it: its workers open
// the coordinator's storage from the Location in Deploy.
type located interface {
	Location() state.Location
}

// locationOf returns where other processes open s, or false if they
// cannot.
func locationOf(s any) (state.Location, bool) {
	l, ok := s.(located)
	if !ok {
		return state.Location{}, false
	}
	loc := l.Location()
	return loc, loc.Root != ""
}

// openStorage opens the checkpoint storage of job jobID ("": the root
// itself) under root: an s3:// URL (endpoint, region and credentials from
// the environment; see s3.FromURL) or a directory. A storage that holds
// connections is closed by closeStorage.
func openStorage(root, jobID string, log *zap.Logger) (state.Storage, error) {
	if s3.IsURL(root) {
		cfg, err := s3.FromURL(root, jobID)
		if err != nil {
			return nil, err
		}
		cfg.Logger = log
		st, err := s3.New(context.Background(), cfg)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	if strings.Contains(root, "://") {
		return nil, fmt.Errorf("weir: checkpoint storage %q: unknown scheme (a directory, or s3://bucket/prefix)", root)
	}
	return state.NewFileStorage(state.FileStorageConfig{Dir: root, JobID: jobID, Logger: log})
}

// closeStorage releases what s holds (an object store's connections).
func closeStorage(s any, log *zap.Logger) {
	if c, ok := s.(io.Closer); ok {
		if err := c.Close(); err != nil {
			log.Warn("closing checkpoint storage", zap.Error(err))
		}
	}
}

// openLocation opens the storage at loc, as the process that sent it has
// it open.
func openLocation(loc state.Location, log *zap.Logger) (state.Storage, error) {
	if loc.Root == "" {
		return nil, errors.New("weir: no checkpoint storage location")
	}
	return openStorage(loc.Root, loc.JobID, log)
}

func wireLocation(l state.Location) cluster.StorageLocation {
	return cluster.StorageLocation{Root: l.Root, JobID: l.JobID}
}

func storageLocation(l cluster.StorageLocation) state.Location {
	return state.Location{Root: l.Root, JobID: l.JobID}
}

// storages keeps the storages a worker opened, by location, until it
// stops: attempts after the first reuse them.
type storages struct {
	log *zap.Logger
	mu  struct {
		sync.Mutex
		open map[state.Location]state.Storage
	}
}

func (s *storages) get(loc state.Location) (state.Storage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.mu.open[loc]; ok {
		return st, nil
	}
	st, err := openLocation(loc, s.log)
	if err != nil {
		return nil, err
	}
	if s.mu.open == nil {
		s.mu.open = map[state.Location]state.Storage{}
	}
	s.mu.open[loc] = st
	return st, nil
}

func (s *storages) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.mu.open {
		closeStorage(st, s.log)
	}
	s.mu.open = nil
}

// openObjectRestorePoint opens p, an s3:// URL of a checkpoint (…/chk-N),
// a savepoint, or a job's place (its newest checkpoint whose files all
// verify). claim reports a checkpoint of own, the job's own storage.
// cleanup releases a storage opened for it.
func openObjectRestorePoint(p string, own state.Storage, log *zap.Logger) (_ *deploy.RestorePoint, claim bool, cleanup func(), err error) {
	bucket, prefix, err := s3.ParseURL(p)
	if err != nil {
		return nil, false, nil, err
	}
	p = strings.TrimSuffix(s3.Scheme+bucket+"/"+prefix, "/")
	ownPlace := ""
	if loc, ok := locationOf(own); ok {
		ownPlace = strings.TrimSuffix(loc.String(), "/")
	}
	open := func(place string) (state.Storage, func(), error) {
		st, err := openStorage(place, "", log)
		if err != nil {
			return nil, nil, err
		}
		return st, func() { closeStorage(st, log) }, nil
	}
	if v, ok := strings.CutPrefix(path.Base(prefix), "chk-"); ok {
		id, perr := strconv.ParseUint(v, 10, 64)
		if perr != nil || id == 0 {
			return nil, false, nil, errors.New("not a checkpoint")
		}
		place := s3.Scheme + bucket + "/" + path.Dir(prefix)
		if place == ownPlace {
			m, err := own.ReadMetadata(barrier.CheckpointID(id))
			if err == nil {
				err = verify(own, m)
			}
			if err != nil {
				return nil, false, nil, err
			}
			return &deploy.RestorePoint{Meta: m, Reader: own}, true, func() {}, nil
		}
		st, done, err := open(place)
		if err != nil {
			return nil, false, nil, err
		}
		m, err := st.ReadMetadata(barrier.CheckpointID(id))
		if err == nil && m.JobID != "" && m.JobID != path.Base(path.Dir(prefix)) {
			err = &state.CorruptError{Path: p + "/" + state.MetadataFile,
				Reason: fmt.Sprintf("it is the metadata of job %q, in the place of job %q", m.JobID, path.Base(path.Dir(prefix)))}
		}
		if err == nil {
			err = verify(st, m)
		}
		if err != nil {
			done()
			return nil, false, nil, err
		}
		return &deploy.RestorePoint{Meta: m, Reader: st}, false, done, nil
	}
	if p == ownPlace {
		m, err := own.Latest()
		if err != nil {
			return nil, false, nil, err
		}
		return &deploy.RestorePoint{Meta: m, Reader: own}, true, func() {}, nil
	}
	st, done, err := open(p)
	if err != nil {
		return nil, false, nil, err
	}
	m, sp, err := st.OpenSavepoint(p)
	switch {
	case err == nil:
		return &deploy.RestorePoint{Meta: m, Reader: sp}, false, done, nil
	case !errors.Is(err, state.ErrNotFound):
		done()
		return nil, false, nil, err
	}
	// Not a savepoint: a job's place, or a checkpoint root holding one
	// job's place (that place's newest).
	m, err = st.Latest()
	if errors.Is(err, state.ErrNotFound) {
		if pl, ok := st.(placeLister); ok {
			places, lerr := pl.Places()
			switch {
			case lerr != nil:
				err = lerr
			case len(places) > 1:
				err = &state.SeveralJobsError{Dir: p, Places: places}
			case len(places) == 1 && places[0].JobID != "":
				done()
				return openObjectRestorePoint(p+"/"+places[0].JobID, own, log)
			}
		}
	}
	if err != nil {
		done()
		return nil, false, nil, err
	}
	return &deploy.RestorePoint{Meta: m, Reader: st}, false, done, nil
}

// placeLister is checkpoint storage that lists the job places under it
// read as a checkpoint root.
type placeLister interface {
	Places() ([]state.Place, error)
}

// verifier is storage that checks a checkpoint's state files.
type verifier interface {
	Verify(m state.Metadata) error
}

func verify(st state.Storage, m state.Metadata) error {
	if v, ok := st.(verifier); ok {
		return v.Verify(m)
	}
	return nil
}
