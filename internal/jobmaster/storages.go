package jobmaster

import (
	"errors"

	"go.uber.org/zap"

	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/state"
)

// located is checkpoint storage that another process can open: its
// Location names it (state.FileStorage on the operating system's file
// system). A job across processes needs it: its workers open the
// coordinator's storage from the Location in Deploy.
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
// itself) under root, a directory.
func openStorage(root, jobID string, log *zap.Logger) (state.Storage, error) {
	return state.NewFileStorage(state.FileStorageConfig{Dir: root, JobID: jobID, Logger: log})
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
