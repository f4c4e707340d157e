// Package barrier holds checkpoint barriers and the barrier handlers.
//
// A barrier handler is the state machine that sits between a task's input
// channels and its operator. It sees every checkpoint barrier, cancel
// marker and end of partition the task takes from its inputs, and decides
// when the task must stop consuming a channel, resume, take a snapshot
// for a checkpoint, give a checkpoint up, or record in-flight data as a
// checkpoint's channel state. It does nothing itself: it is pure and
// single-goroutine (no goroutines, timers, clocks, channels or I/O
// inside; time comes in as an argument) and hands each decision to a
// Controller, which the task implements, the moment it makes it.
//
// Four handlers implement Handler, after Apache Flink's:
//
//   - Aligner (NewAligned; Mode ExactlyOnce) aligns barriers: a channel
//     that delivered barrier N is blocked until every open channel has
//     delivered it, so the snapshot covers exactly the records before the
//     barrier on every input.
//   - Tracker (NewTracker; Mode AtLeastOnce) blocks nothing: it counts
//     barriers per checkpoint and triggers when the last one arrives, so
//     records after a barrier may already be in the snapshot's state and
//     are replayed on restore. It follows at most MaxTrackedCheckpoints
//     pending checkpoints.
//   - Unaligner (NewUnaligned; Alignment Unaligned) takes unaligned
//     checkpoints: barriers are priority events that overtake queued
//     data, the first one triggers the checkpoint, and the data in flight
//     ahead of the missing barriers becomes the checkpoint's channel
//     state.
//   - TimeoutAligner (NewAlignedWithTimeout; Alignment AlignedWithTimeout)
//     starts every checkpoint aligned and switches it to unaligned when
//     the alignment outlasts a timeout counted from the checkpoint's
//     timestamp.
//
// New picks one of the first two by Mode; NewWithConfig picks any of them
// by Config. A Router (NewRouter) combines an Aligner for savepoints with
// an Unaligner or a TimeoutAligner for checkpoints, for a task whose
// checkpoints are unaligned: savepoints stay aligned, and checkpoint IDs
// grow across both (a newer one subsumes the other handler's older one). The last two implement UnalignedHandler and need an
// UnalignedController. Their exact rules are those of
// docs/barrier-scenarios.md; testdata/*.txt holds them as transcripts.
//
// # The Controller contract
//
// A handler calls its Controller synchronously, from inside the Process*,
// Tick or Abort call that caused the decision, in decision order:
//
//   - BlockChannel(ch): ch delivered the barrier of the current
//     checkpoint; the task takes nothing that follows that barrier on ch
//     until ResumeAllChannels (ch's producer stopped after the barrier and
//     gets no RESUME_CONSUMPTION until then). After PrioritizeBarrier the
//     data queued ahead of the barrier may still be taken.
//   - AbortCheckpoint(id, reason): before anything that follows from it:
//     a barrier for a newer checkpoint first aborts the one in progress,
//     then resumes, then starts the new one; a cancel marker first aborts
//     an older one in progress (AbortSubsumed), then its own id
//     (AbortCancelMarker), then resumes.
//   - TriggerCheckpoint(b): the task snapshots now, before it consumes
//     anything more, and forwards b. After an alignment, ResumeAllChannels
//     follows if any channel is blocked. The channel whose barrier
//     completes an alignment is not blocked first.
//
// An UnalignedController also receives:
//
//   - At an unaligned trigger: TriggerCheckpoint(b) with
//     b.Options.Alignment == Unaligned (forward b as a priority event),
//     then PersistChannel(ch, id) for every open channel still missing
//     the barrier, in ascending channel order (for an Unaligner: every
//     open channel, including the one whose barrier triggered).
//   - At a switch (TimeoutAligner): SwitchToUnaligned(id), then the
//     unaligned trigger as above, then PrioritizeBarrier(ch, id) and
//     BlockChannel(ch) for each announced barrier still queued, in
//     announcement order.
//   - PrioritizeBarrier(ch, id) then BlockChannel(ch) whenever an
//     announced barrier overtakes after the switch.
//   - ChannelStateComplete(id) when the last missing barrier of an
//     unaligned checkpoint arrives or its channel ends, followed by
//     ResumeAllChannels if any channel is blocked.
//   - ScheduleAlignmentTimer(id, deadline) when a TimeoutAligner starts a
//     checkpoint.
//
// A Controller must not call back into the handler.
//
// # Driving a handler
//
// The task owns the handler and calls it from its one goroutine:
//
//  1. Create it with New or NewWithConfig over the number of input
//     channels, with the task as Controller (as UnalignedController for
//     Unaligned and AlignedWithTimeout).
//  2. Priority events first: a barrier that arrives as a priority event
//     (Unaligner) goes to ProcessPriorityBarrier at once, ahead of
//     everything queued on its channel.
//  3. Announcements (TimeoutAligner): when a barrier waits in a channel's
//     queue, with no other barrier ahead of it there, and the channel is
//     not blocked, call ProcessAnnouncement once for it, before the
//     operator can reach it. Since a producer sends nothing after an
//     aligned barrier until it is resumed, that is when the barrier
//     arrives.
//  4. Take the next item from an unblocked channel (or, after
//     PrioritizeBarrier, one queued ahead of the barrier a blocked channel
//     is blocked at). A data buffer goes to the operator; a barrier goes
//     to ProcessBarrier (if the handler did not block the channel, resume
//     its producer); a cancel marker to ProcessCancel; an end of partition
//     to ProcessEndOfPartition.
//  5. Carry out the Controller calls as they come (see above). On
//     TriggerCheckpoint snapshot the operator state and then forward the
//     barrier; on AbortCheckpoint decline the checkpoint, forward a
//     CancelMarker, and stop recording and drop the channel state of id.
//     A resumption takes effect once the handler call has returned: from
//     then on, take the items that waited on the resumed channels,
//     earliest first.
//  6. Timers: on ScheduleAlignmentTimer register a timer in the mailbox;
//     when it fires, call Tick with the current time (unix milliseconds).
//     Stale timers need no cancelling.
//  7. When the coordinator aborts a checkpoint, or the task declines one
//     on its own, call Abort(id): the handler drops that checkpoint (and
//     any older) without calling AbortCheckpoint, and resumes channels
//     blocked for it. The task stops recording for it itself.
//
// # Recording channel state
//
// PersistChannel is carried out by the input channel, under the lock
// that orders its arrivals, because the point where recording stops is a
// position in the channel's stream: the channel's barrier. Each input
// channel keeps the id it records for (none at first) and remembers the
// id and queue position of the last barrier it received. On
// PersistChannel(ch, id): if barrier id already reached ch (it waits in
// the queue, or was consumed or prioritized), the data buffers queued
// ahead of it go into id's channel state; otherwise every queued data
// buffer does, and the channel records id. While it records id, each data
// buffer arriving on the channel goes into id's channel state on arrival
// (and is queued as usual); the arrival of barrier id, the channel's end
// of partition, or the end of checkpoint id (ChannelStateComplete,
// AbortCheckpoint, Abort) stops it. With no unaligned checkpoint pending
// the cost per data buffer is one field check. The recorded buffers still
// reach the operator in their turn; ChannelStateComplete(id) means every
// channel has stopped recording id and its channel state can be
// finalized.
//
// Naming a channel outside 0..N-1, or one after its end of partition, is
// a bug in the caller: the handler panics with the values. Handing it an
// item from a channel it blocked (other than one queued ahead of a
// prioritized barrier) is a bug too; it does not check for it.
package barrier
