package jobmaster

import (
	"errors"
	"sync"

	"github.com/weirstream/weir/barrier"
)

// FinalCommits holds what finished sinks commit once the job attempt
// succeeded (or abort when it failed). Safe for concurrent use.
type FinalCommits struct {
	mu struct {
		sync.Mutex
		fns      []func(commit bool, completed barrier.CheckpointID) error
		cleanups []func() error // run after a successful job's commits
	}
}

// Add registers fn, called once when the attempt is settled: commit tells
// whether the job finished; after a failure, completed is the latest
// completed checkpoint, whose transactions must be committed all the same.
func (f *FinalCommits) Add(fn func(commit bool, completed barrier.CheckpointID) error) {
	f.mu.Lock()
	f.mu.fns = append(f.mu.fns, fn)
	f.mu.Unlock()
}

// AddCleanup registers fn to run once after a successful job's commits.
func (f *FinalCommits) AddCleanup(fn func() error) {
	f.mu.Lock()
	f.mu.cleanups = append(f.mu.cleanups, fn)
	f.mu.Unlock()
}

// Resolve settles what was registered and, after a successful commit,
// runs the cleanups.
func (f *FinalCommits) Resolve(commit bool, completed barrier.CheckpointID) error {
	if err := f.Settle(commit, completed); err != nil || !commit {
		return err
	}
	return f.Cleanup()
}

// Settle commits (commit) or aborts everything registered and forgets
// it; after a failure, transactions of checkpoints up to completed (the
// latest completed one) are committed all the same.
func (f *FinalCommits) Settle(commit bool, completed barrier.CheckpointID) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	fns := f.mu.fns
	f.mu.fns = nil
	f.mu.Unlock()
	var errs []error
	for _, fn := range fns {
		errs = append(errs, fn(commit, completed))
	}
	return errors.Join(errs...)
}

// Cleanup runs the cleanups of a job whose every sink committed: on a
// cluster, the coordinator runs them once all workers settled.
func (f *FinalCommits) Cleanup() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	cl := f.mu.cleanups
	f.mu.Unlock()
	var errs []error
	for _, fn := range cl {
		errs = append(errs, fn())
	}
	return errors.Join(errs...)
}
