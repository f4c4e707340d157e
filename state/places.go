package state

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/weirstream/weir/barrier"
)

// Place is a job's checkpoint place found in a checkpoint root.
type Place struct {
	// JobID names the place, Root/JobID; empty for checkpoints in Root
	// itself (the layout before metadata version 4).
	JobID string
	// Newest is the highest checkpoint ID of a chk-N directory there.
	Newest barrier.CheckpointID
}

// SeveralJobsError is returned when a checkpoint root to restore from
// holds the checkpoints of several jobs: the restore must name one.
type SeveralJobsError struct {
	Dir    string
	Places []Place
}

func (e *SeveralJobsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "state: %s holds the checkpoints of %d jobs; restore from one job's directory:", e.Dir, len(e.Places))
	for _, p := range e.Places {
		dir := filepath.Join(e.Dir, p.JobID)
		if strings.Contains(e.Dir, "://") { // a URL: filepath.Join would clean its "//"
			dir = strings.TrimSuffix(e.Dir, "/") + "/" + p.JobID
		}
		if p.JobID == "" {
			dir += " (checkpoints of weir before job IDs)"
		}
		fmt.Fprintf(&b, " %s (newest chk-%d);", dir, p.Newest)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// FindPlaces lists the places with checkpoints (a chk-N directory) in the
// checkpoint root dir of fsys: each job's directory, and dir itself if it
// holds checkpoints directly (the layout before metadata version 4).
func FindPlaces(fsys FS, dir string) ([]Place, error) {
	newest := func(d string) (barrier.CheckpointID, error) {
		names, err := fsys.ReadDir(d)
		if err != nil {
			return 0, err
		}
		var max barrier.CheckpointID
		for _, n := range names {
			if id, ok := parseChkDir(n); ok && id > max {
				max = id
			}
		}
		return max, nil
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("state: list %s: %w", dir, err)
	}
	var places []Place
	if n, err := newest(dir); err == nil && n > 0 {
		places = append(places, Place{Newest: n})
	}
	for _, name := range names {
		if ValidJobID(name) != nil {
			continue
		}
		n, err := newest(filepath.Join(dir, name))
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) || errors.Is(err, fs.ErrNotExist) {
				continue // a file, not a directory
			}
			return nil, err
		}
		if n > 0 {
			places = append(places, Place{JobID: name, Newest: n})
		}
	}
	return places, nil
}
