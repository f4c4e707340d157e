// Package coordinator is the job-manager side of weir's checkpointing.
//
// The central noun is the CheckpointCoordinator (Flink's
// CheckpointCoordinator). A checkpoint is triggered at the source tasks,
// travels through the job as a barrier, and is *pending* until every task
// of the current execution attempt has acknowledged it with its state
// snapshot. The coordinator then writes the checkpoint's metadata durably
// through Storage, and only then is the checkpoint *completed*: the newest
// Config.Retained completed checkpoints are kept (older ones are discarded,
// savepoints never), and every task is told (two-phase-commit sinks commit
// now). A decline, a timeout or a failed metadata write *aborts* it: every
// task is told and its files are discarded. More than
// Config.TolerableFailures consecutive failed checkpoints fail the job.
// A savepoint is a checkpoint the user asks for, exported into its own
// directory, never deleted by retention and never a failover restore point;
// tasks are not told it completed, so it commits no side effects (as in
// Flink since 1.15).
//
// Checkpoints go on after tasks finished (Flink's FLIP-147): a finished
// task (TaskFinished) is no longer triggered nor expected to acknowledge,
// and checkpoints record it as finished so that a job restored from them
// does not run it again. With the job's topology (WithUpstream), a task
// whose upstream tasks all finished is triggered directly, like a source;
// a task waiting for a final checkpoint (TaskFinishing) makes one due at
// once. Checkpoints are unaligned, or aligned with a timeout, as
// Config.Unaligned and Config.AlignedTimeout say (their barriers carry
// the options); savepoints are always aligned.
//
// Inside is a pure state machine (no goroutines, clocks or I/O; time is an
// argument) that decides; the CheckpointCoordinator is the thin driver that
// runs its timers and carries out its decisions in order. Restart
// strategies (RestartStrategy) live here too: the job runner asks them how
// long to wait before restarting a failed job.
//
// # Usage
//
// The caller's duties, in order:
//
//  1. New(cfg, storage, opts...) builds a coordinator; it starts nothing.
//     Restore(m, claim) seeds it with the checkpoint or savepoint the job
//     starts from, if any (checkpoint IDs continue after m.ID).
//  2. Attach(sources, all, gateway, WithUpstream(topology)) when a job
//     attempt is deployed: checkpointing starts for its tasks, the first
//     periodic checkpoint after a random delay in [MinPause, Interval].
//  3. Run(ctx) in its own goroutine: it fires the periodic scheduler and
//     timeouts and makes every call to the gateway. Storage calls (metadata
//     writes, savepoint exports, discards) go, in the order decided, to a
//     goroutine of their own that Run's coordinator starts while they are
//     queued; their results come back into the state machine as inputs, so
//     slow storage delays no trigger or timeout. Run returns when ctx is
//     done or the coordinator is closed.
//  4. TaskRunning, TaskFinishing and TaskFinished as the tasks report
//     them; Acknowledge / Decline from the tasks (any goroutine) for every
//     checkpoint they are triggered for or receive barriers of.
//     TriggerCheckpoint and TriggerSavepoint take checkpoints on demand;
//     LatestCompleted and Stats report.
//  5. Detach(reason) when the attempt fails or ends: pending checkpoints
//     are aborted and the scheduler pauses. To fail over, consult a
//     RestartStrategy, restore the tasks from LatestCompleted, and Attach
//     the new attempt. OnFailure tells when too many checkpoints failed.
//  6. Close (the job lives on elsewhere: every checkpoint is kept) or
//     Shutdown(status) (the job ended: checkpoints are kept or deleted
//     according to status and Config.RetainOnCancel). Both are idempotent
//     and wait for Run to return.
package coordinator
