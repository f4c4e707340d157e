// Package task runs one parallel instance of an operator chain: a Task.
//
// A Task is one goroutine running a mailbox loop. A source task pulls its
// chain's head (a Source) a few records at a time; any other task polls
// its input gate (network.InputGate) and hands every record to the
// chain's head (a RecordProcessor), which decodes it and calls the next
// operators directly. Between batches the loop runs mails (Post), such as
// the coordinator's checkpoint triggers and notifications, flushes
// partially filled output buffers at the buffer timeout and runs
// processing-time callbacks when they are due. Record processing, barrier
// handling, snapshots, watermarks and timers therefore never run
// concurrently, and no checkpoint lock exists.
//
// The task sees its operators only through Operator, their lifecycle and
// checkpoint hooks, always called from its goroutine: Open (with an
// OperatorContext holding the restored state backends), then records,
// PrepareSnapshotPreBarrier and SnapshotState at every checkpoint,
// NotifyCheckpointComplete or NotifyCheckpointAborted after it, Finish
// when the input ended, Close at the end. Optional interfaces add event
// time (EventTimeOperator: the watermark reaches the operators in chain
// order, each firing its timers before the next sees it),
// processing-time callbacks (ProcessingTimeOperator) and a final
// checkpoint before the task ends (FinalCheckpointOperator, for
// two-phase-commit sinks).
//
// Checkpoints: a source task takes a checkpoint when triggered
// (TriggerCheckpoint); a task with inputs when its barrier handler
// (package barrier: aligned, at-least-once, unaligned) decides from the
// barriers its channels delivered. It then lets its operators prepare,
// forwards the barrier, takes the synchronous part of the snapshot and
// writes the state files asynchronously, and acknowledges with the state
// handles, or declines with a reason, to its CheckpointResponder. An
// unaligned checkpoint also records the buffers its barrier overtook as
// channel state, restored before any new input.
//
// Run returns when the task finished (its input ended and every output
// got end of partition), failed (an *Error naming the task and the
// operator; a panic in user code is recovered as a *PanicError inside it)
// or was canceled with its context.
package task
