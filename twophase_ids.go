package weir

import (
	"context"

	"github.com/weirstream/weir/barrier"
)

// CheckpointBeginner is an optional interface of a TwoPhaseCommitter whose
// transactions are named after checkpoints (a Kafka sink's transactional
// ids): the sink calls BeginAfter instead of Begin, with the last
// checkpoint taken before the new transaction (the one the job restored,
// or 0 at a fresh start), so the transaction will be pre-committed at a
// later one. After a failure, a committer can thus tell the transactions
// of the restored checkpoint (named at or below it, committed by the sink)
// from those a failed attempt left open (named above it, to be aborted).
//
// A TwoPhaseCommitter may also implement io.Closer: the sink closes it
// when its task ends, after aborting the open transaction. Commit and
// Abort may still be called after Close, for the commits at the end of
// the job.
type CheckpointBeginner[Txn any] interface {
	BeginAfter(last barrier.CheckpointID) (Txn, error)
}

// ContextSetter is an optional interface of a TwoPhaseCommitter that calls
// other systems: before any other call the sink hands it a context that
// is done when the sink's task is canceled (the job is canceled or
// restarts), so that a commit or flush waiting on an unreachable system
// gives way to the restart instead of holding it up. The context stays
// alive when the task finishes; calls after Close (the commits at the end
// of the job) should not use it.
type ContextSetter interface {
	SetContext(ctx context.Context)
}

// TimestampWriter is an optional interface of a TwoPhaseCommitter that
// writes the records' event timestamps too (a Kafka sink sets each
// record's timestamp): the sink calls WriteTimestamped instead of Write,
// with the record's timestamp in unix milliseconds, or
// eventtime.NoTimestamp if the stream has none.
type TimestampWriter[T, Txn any] interface {
	WriteTimestamped(txn Txn, v T, ts int64) error
}
