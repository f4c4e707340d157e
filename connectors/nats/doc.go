// Package nats reads and writes NATS JetStream streams from weir jobs
// (on github.com/nats-io/nats.go), with Flink's guarantees.
//
// # Source
//
// Source reads a stream into a timestamped stream. Its splits are subject
// filters of the stream (SourceConfig.Subjects; by default the whole
// stream is one split): the i-th filter is read by subtask i mod
// parallelism, so every attempt agrees, and each subtask reads its
// filters through one pull consumer of its own, named Consumer-subtask.
// A stream partitioned by subject (a subject transform with
// {{partition(n,…)}}, see PartitionSubjects) thus runs at any parallelism
// up to its partition count and can be rescaled.
//
// The position of each split, the stream sequence of its next message,
// is kept in the job's checkpoints, not in the consumer: a restarted job
// creates its consumers anew at the checkpointed sequences and skips
// what it has read, so exactly-once never relies on acknowledgements.
// The consumers acknowledge the messages a checkpoint covers only once it
// completes (AckAll: the last one; on a work-queue stream, which takes
// only explicit acknowledgements, each one, kept until then), so that a
// work-queue or interest stream removes a message only when no restore
// can need it again.
//
// Records carry the time the stream stored the message as event time, or
// a header's (TimestampHeader), or what the WatermarkStrategy's timestamp
// function says; watermarks are generated per split and combined per
// subtask (weir.FromSplitReader), so a split that lags holds event time
// back and an idle one (WatermarkStrategy.WithIdleness) does not stall
// it. A Bounded source stops at the last message each split had when the
// job first started.
//
// A fetch that fails (the consumer was deleted) and a lost connection
// (the server went away or restarted) fail the task, of a source or a
// sink: the job fails over, restores its latest checkpoint and resumes
// once the server is back (its restarts fail until then, within the
// restart strategy). nats.go would reconnect and carry on, but what was
// in flight at the loss (a fetch, unacknowledged publications) is then
// unknown; restoring the checkpoint settles it.
//
// # Sink
//
// Sink publishes a stream to subjects with one of two guarantees:
//
//   - AtLeastOnce: records are published asynchronously as they come
//     (at most MaxPending awaiting acknowledgement) and every checkpoint
//     waits for their acknowledgements; after a failure some are
//     published again.
//   - ExactlyOnce: each subtask keeps a checkpoint's records in the
//     checkpoint itself (at most MaxTransactionBytes) and publishes them
//     when the checkpoint completes, each with a Nats-Msg-Id of
//     MsgIDPrefix-subtask-checkpoint-index. After a failure the job
//     publishes the records of the checkpoint it restores again, with the
//     same IDs, and the stream drops those it already has.
//
// # The limit of exactly-once: the duplicate window
//
// JetStream remembers message IDs only for the stream's duplicate window
// (StreamConfig.Duplicates, 2 minutes by default). The records of a
// checkpoint are published once it completes, and again by a restore
// from it; the stream drops the second copies only if the restore comes
// within the window of the first publication. So exactly-once holds when
// the job restores within the window of its last completed checkpoint:
// the window must exceed the checkpoint interval plus the time a failed
// job takes to restart (Execute fails if it does not exceed the
// interval, and warns below the interval plus a minute). A job that stays
// down longer, or is restored from an older checkpoint or savepoint,
// publishes the records of that checkpoint twice (the sink logs a
// warning when it does). A longer window costs the server memory for the
// IDs of every message in it.
//
// Readers see a checkpoint's records once it completes: the checkpoint
// interval is the latency of exactly-once output.
//
// # Checked before the job runs
//
// Execute fails, naming the connector, before any record is read, on a
// bad URL, a server that cannot be reached, a stream that does not exist,
// subject filters the stream does not have, a sink subject no stream
// captures, and an exactly-once sink whose duplicate window does not
// exceed the checkpoint interval.
//
// # Duties of the user
//
//  1. Choose a Consumer name unique to each source, and a MsgIDPrefix
//     unique to each exactly-once sink, among the jobs using the stream;
//     keep them across restores.
//  2. Size the stream's duplicate window as above.
//  3. Read exactly-once output knowing that a checkpoint's records appear
//     together when it completes.
package nats
