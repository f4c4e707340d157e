package weir

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/jobmaster"
)

type recordingCommitter struct {
	next             int
	committed, abort []int
}

func (c *recordingCommitter) Begin() (int, error)     { c.next++; return c.next, nil }
func (c *recordingCommitter) Write(int, string) error { return nil }
func (c *recordingCommitter) PreCommit(int) error     { return nil }
func (c *recordingCommitter) Commit(txn int) error {
	c.committed = append(c.committed, txn)
	return nil
}
func (c *recordingCommitter) Abort(txn int) error { c.abort = append(c.abort, txn); return nil }

// A sink that finished before its checkpoints' completion reached it: when
// the job then fails, transactions of completed checkpoints are committed
// (the restore would commit them too), the rest aborted.
func TestFinalCommitsAfterFailureKeepCompletedCheckpoints(t *testing.T) {
	c := &recordingCommitter{}
	o := &twoPhaseOp[string, int]{c: c, final: &jobmaster.FinalCommits{}}
	require.NoError(t, o.begin())
	o.pending = []pendingTxn[int]{{id: 3, txn: 100}, {id: 5, txn: 101}}
	require.NoError(t, o.Finish())

	require.NoError(t, o.final.Resolve(false, barrier.CheckpointID(4)))
	require.Equal(t, []int{100}, c.committed)
	require.Equal(t, []int{101, 1}, c.abort)

	// Resolved once: nothing is left to commit.
	require.NoError(t, o.final.Resolve(true, 0))
	require.Equal(t, []int{100}, c.committed)
}
