// Package kafka reads and writes Apache Kafka topics from weir jobs, with
// Flink's guarantees, in pure Go (on github.com/twmb/franz-go).
//
// # Source
//
// Source reads topics (a list or a pattern) into a stream. Its central
// noun is the partition: every partition is owned by exactly one source
// subtask, chosen from the topic and the partition number alone, so that
// every attempt and every subtask agree without talking to each other.
// Each subtask keeps the next offset of each of its partitions in the
// job's checkpoints (not in a consumer group): a restarted job resumes at
// exactly the checkpointed offsets, and a job restored at another
// parallelism hands every partition, with its offset, to its new owner.
// Offsets may additionally be committed to a consumer group once a
// checkpoint completes, for monitoring tools, as Flink does.
//
// Records carry the Kafka record timestamp as event time (or what the
// WatermarkStrategy's timestamp function says); watermarks are generated
// per partition and combined per subtask (weir.FromSplitReader), so a
// partition that lags holds event time back and an idle one (see
// WatermarkStrategy.WithIdleness) does not stall it. The source never
// blocks its task while it waits for records: a background fetch wakes it.
//
// # Sink
//
// Sink writes a stream to topics with one of three guarantees:
//
//   - ExactlyOnce: each subtask writes into a Kafka transaction per
//     checkpoint, named prefix-subtask-checkpoint. At a checkpoint the
//     transaction is flushed (pre-committed) and its transactional id,
//     producer id and epoch go into the checkpoint; once the checkpoint
//     completes it is committed. After a failure the job commits the
//     transactions of the checkpoint it restores (an EndTxn with the
//     stored producer id and epoch; committing twice is harmless) and
//     aborts those that later attempts left open. Read the output with a
//     read-committed consumer.
//   - AtLeastOnce: records are flushed at every checkpoint; after a
//     failure some are written again.
//   - None: records are flushed when the sink ends; a failure may lose
//     what was not flushed yet.
//
// # Duties of the user
//
//  1. Choose a transactional-id prefix unique to each exactly-once sink of
//     every job writing to the cluster (the job aborts lingering
//     transactions of its prefix at startup, and, restored after the
//     prefix changed, of the old one).
//  2. Set the transaction timeout above the checkpoint interval plus the
//     time a failed job needs to restart; a transaction the broker aborts
//     before it is committed is lost, and the job fails saying so.
//  3. Read exactly-once output with a read-committed consumer.
package kafka
