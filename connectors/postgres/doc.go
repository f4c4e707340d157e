// Package postgres writes weir streams into PostgreSQL tables (on
// github.com/jackc/pgx/v5), exactly once or as idempotent upserts.
//
// # Exactly once
//
// Sink with Mode ExactlyOnce (the default) plugs into weir's
// two-phase-commit sink (weir.TwoPhaseCommitSink). Each subtask writes a
// checkpoint's rows in one transaction on a connection of its own, COPYing
// them BatchSize at a time; at the checkpoint's barrier the transaction is
// prepared (PREPARE TRANSACTION prefix-subtask-checkpoint, its transaction
// id recorded) and its name goes into the checkpoint; when the checkpoint
// completes it is committed (COMMIT PREPARED, on a second connection, in
// the background while the subtask writes on; the next checkpoint's
// pre-commit waits for it). A commit retries on a new connection while
// the server is unreachable.
// After a failure the job commits the prepared transactions of the
// checkpoint it restores (one that is no longer prepared is checked by its
// transaction id: committed already is fine, rolled back is
// ErrTransactionLost) and, at each subtask's first transaction, rolls back
// the prepared transactions of its prefix that later attempts left. The
// rows of a transaction that was still open (a connection killed, a server
// restarted, a task failed) are rolled back by the server and written
// again from the checkpoint.
//
// It needs checkpointing and a server with max_prepared_transactions above
// 0 (at least twice the sink's parallelism); Execute fails otherwise.
//
// # Upsert
//
// Mode Upsert writes each batch (when it is full and at every checkpoint)
// with COPY into a temporary table and INSERT … SELECT … ON CONFLICT (Key)
// DO UPDATE from there, in a transaction of its own: at least once, but
// idempotent by key, so the table ends as if each row were written once
// (within a batch, the last row of a key wins). It needs a unique index or
// primary key on exactly the Key columns, and no prepared transactions.
//
// # Checked before the job runs
//
// Execute fails, naming the sink, before any record is read, on a bad
// connection string, a server that cannot be reached or refuses the user,
// a table that does not exist (or is a view), columns it lacks, a NOT NULL
// column without a default left out, a generated column written, missing
// INSERT (and, for upserts, UPDATE) privileges, no unique index on the
// upsert key, or max_prepared_transactions = 0.
//
// # Duties of the user
//
//  1. Choose a TransactionPrefix unique to each exactly-once sink among all
//     the jobs writing to the server (prepared transactions are named
//     server-wide; the job rolls back lingering ones of its prefix, and,
//     restored after the prefix changed, of the old one).
//  2. A job that fails for good, or is canceled, leaves the prepared
//     transactions of its last checkpoints: they hold their locks until
//     the job runs again from its checkpoint (which commits or rolls them
//     back) or someone ends them (SELECT gid FROM pg_prepared_xacts WHERE
//     gid LIKE 'prefix-%'; then COMMIT PREPARED or ROLLBACK PREPARED).
//  3. Readers see a checkpoint's rows when it completes: the checkpoint
//     interval is the latency of the output.
package postgres
