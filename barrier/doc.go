// Package barrier holds checkpoint barriers and the barrier handlers.
//
// A barrier handler is the state machine that sits between a task's input
// channels and its operator. It sees every checkpoint barrier, cancel
// marker and end of partition the task takes from its inputs, and decides
// when the task must stop consuming a channel, resume, take a snapshot
// for a checkpoint, or give a checkpoint up. It does nothing itself: it is
// pure and single-goroutine (no goroutines, timers, clocks, channels or
// I/O inside) and hands each decision to a Controller, which the task
// implements, the moment it makes it.
//
// Two handlers implement Handler, after Apache Flink's:
//
//   - Aligner (NewAligned, mode ExactlyOnce) aligns barriers: a channel
//     that delivered barrier N is blocked until every open channel has
//     delivered it, so the snapshot covers exactly the records before the
//     barrier on every input.
//   - Tracker (NewTracker, mode AtLeastOnce) blocks nothing: it counts
//     barriers per checkpoint and triggers when the last one arrives, so
//     records after a barrier may already be in the snapshot's state and
//     are replayed on restore. It follows at most MaxTrackedCheckpoints
//     pending checkpoints.
//
// New picks one by Mode. The exact rules of both are the ones of
// BARRIER_SCENARIOS.md; testdata/*.txt holds them as transcripts.
//
// # The Controller contract
//
// A handler calls its Controller synchronously, from inside the Process*
// or Abort call that caused the decision, in decision order:
//
//   - BlockChannel(ch): after the item from ch was consumed; the task
//     takes nothing more from ch until ResumeAllChannels.
//   - AbortCheckpoint(id, reason): before anything that follows from it:
//     a barrier for a newer checkpoint first aborts the alignment in
//     progress, then resumes, then blocks its own channel; a cancel marker
//     first aborts an older alignment in progress (AbortSubsumed), then
//     its own id (AbortCancelMarker), then resumes.
//   - TriggerCheckpoint(b) and then, if any channel is blocked,
//     ResumeAllChannels(): the task snapshots before it consumes anything
//     more, so no record behind a barrier reaches the snapshot.
//
// The channel whose barrier completes an alignment is not blocked first.
// A Controller must not call back into the handler.
//
// # Driving a handler
//
// The task owns the handler and calls it from its one goroutine:
//
//  1. Create it with New (or NewAligned/NewTracker) over the number of
//     input channels, with the task as Controller.
//  2. Take the next item from an unblocked channel. A data buffer goes to
//     the operator; a barrier goes to ProcessBarrier, a cancel marker to
//     ProcessCancel, an end of partition to ProcessEndOfPartition.
//  3. Carry out the Controller calls as they come: mark channels blocked;
//     on TriggerCheckpoint snapshot the operator state and then forward
//     the barrier; on AbortCheckpoint decline the checkpoint and forward a
//     CancelMarker. A resumption takes effect once the Process* call has
//     returned: from then on, take the items that waited on the resumed
//     channels, earliest first.
//  4. When the coordinator aborts a checkpoint, or the task declines one
//     on its own, call Abort(id): the handler drops that checkpoint (and
//     any older) without calling AbortCheckpoint, and resumes channels
//     blocked for it.
//
// Naming a channel outside 0..N-1, or one after its end of partition, is
// a bug in the caller: the handler panics with the values. Handing it an
// item from a channel it blocked is a bug too; it does not check for it.
//
// # Later handlers
//
// Handler is the whole input side, so an unaligned handler or an aligned
// one that times out into unaligned mode can implement it too. What they
// need beyond it stays off the existing contract: their own Controller
// extension (an interface embedding Controller, for example to persist
// in-flight buffers), and time as an explicit input method on their own
// type (a tick or a timestamp), never a clock inside.
package barrier
