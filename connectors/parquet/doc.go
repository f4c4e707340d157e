// Package parquet writes weir streams as Parquet files (on
// github.com/parquet-go/parquet-go), exactly once, with the semantics of
// Flink's FileSink for bulk formats.
//
// # Buckets and part files
//
// Sink writes a stream of Go structs (the Parquet schema is the struct's,
// from its `parquet:"…"` tags) into a directory. Every value goes to a
// bucket, a subdirectory chosen by Config.Bucket (by default the hour of
// its event time, "2006-01-02--15"), and within the bucket to the open part
// file of its subtask:
//
//	<Dir>/<bucket>/part-<uid>-<subtask>-<counter>.parquet
//
// where uid is random per subtask and attempt and counter counts the
// subtask's files, so no two files of any run share a name.
//
// # Life of a part file
//
//   - In progress: written under a hidden name (".part-….parquet.inprogress")
//     that readers of the directory skip (Spark, Hive, DuckDB and Trino skip
//     names with a leading '.' or '_').
//   - Pending: the file is rolled: its footer is written, it is fsynced and
//     closed, and it is listed in the subtask's state. Part files roll at
//     every checkpoint barrier (a Parquet file cannot be reopened and
//     appended to), when their estimated size reaches Config.RollSize,
//     when they have been open Config.RollInterval, and when another
//     bucket needs one of the Config.MaxOpenParts open files.
//   - Committed: once the checkpoint the file belongs to completes, it is
//     renamed to its visible name.
//
// After a failure the job restores its latest completed checkpoint: the
// pending files that checkpoint lists are committed (if the failure came
// before their rename), and what the failed attempt wrote since is
// discarded: once a checkpoint of the new attempt completed, the hidden
// files earlier attempts left (in progress, or pending for a checkpoint
// that never completed) are removed. A reader of the committed files sees
// each record exactly once. A job restored from a savepoint at another
// parallelism commits the savepoint's pending files the same way.
//
// Without checkpointing the part files are committed when the job
// finishes; a failure discards what the failed attempt wrote, and the
// restarted job writes everything again.
//
// # Object storage
//
// With Dir "s3://bucket/prefix" a part file is a multipart upload to its
// committed key: in progress while its parts go up (5 MiB each, the last
// at the roll), pending once the last is up (the transaction records the
// upload ID and the parts' ETags), committed by completing the upload when
// the checkpoint completes, so the object appears whole or not at all.
// Aborted transactions abort their uploads; the uploads earlier attempts
// left are aborted by the same rule as the hidden files above. Execute
// fails before any record is read if the bucket does not exist or the
// credentials are refused.
//
// # Duties of the user
//
//  1. Give each sink its own Dir (or PartPrefix): the sink removes hidden
//     part files of its prefix that it did not write in the current
//     attempt.
//  2. Read only the committed files: skip names with a leading '.' or '_'
//     (the readers named above do so by default).
//  3. Size RollSize, RowGroupSize and MaxOpenParts for memory: a subtask
//     buffers up to RowGroupSize of encoded values per open part file.
//  4. On object storage, keep a lifecycle rule that aborts incomplete
//     uploads longer than a job may take to restore from a checkpoint:
//     the pending part files of that checkpoint are such uploads.
//  5. Expect as many files per bucket and subtask as checkpoints, at
//     least: the checkpoint interval is the lower bound of file sizes'
//     time span.
package parquet
