package weir

import (
	"errors"
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

func TestTxnHandleCodec(t *testing.T) {
	for _, h := range []TxnHandle{{}, {ID: "p-1-2", PreCommitted: true}, {ID: "x", Empty: true, PreCommitted: true}} {
		b := AppendTxnHandle([]byte{9}, h, []byte{1, 2, 3})
		got, extra, err := DecodeTxnHandle(b[1:], 3)
		if err != nil || got != h || string(extra) != "\x01\x02\x03" {
			t.Fatalf("%+v: decoded %+v, %v, %v", h, got, extra, err)
		}
	}
	b := AppendTxnHandle(nil, TxnHandle{ID: "ab"}, []byte{7})
	for _, bad := range [][]byte{nil, {0}, b[:len(b)-1], append(b, 0), append(b[:len(b)-1:len(b)-1], 4)} {
		if _, _, err := DecodeTxnHandle(bad, 1); !errors.Is(err, ErrCorruptTxnHandle) {
			t.Fatalf("%v: got %v, want ErrCorruptTxnHandle", bad, err)
		}
	}
}
