// Package cluster is weir's control plane: it lets one job run across
// several worker processes of the same binary.
//
// The central noun is the session: one worker's registered, bidirectional
// gRPC stream to the coordinator (weir.cluster.JobManager/Connect, stream
// WorkerMessage in, stream CoordinatorMessage out). The worker dials; the
// coordinator runs the only gRPC server (Server). Workers exchange records
// over the data plane (network's TCP transport), never through here; this
// package carries only deployment, task status and checkpoint control.
//
// There is no protoc: the service descriptor is written by hand and the
// messages are plain Go structs, encoded as JSON by a codec forced on both
// ends ("weir-json"), so the package changes no global gRPC registry.
// The messages are the control plane's own, with explicit JSON names:
// metrics travel as TaskMetrics and CheckpointMetrics (durations in integer
// nanoseconds; TaskMetricsFrom, ToTask, CheckpointMetricsFrom and
// ToCoordinator convert), a task's snapshot as the bytes of the state
// package's versioned codec (state.EncodeTaskSnapshot), a checkpoint to
// restore as state.EncodeMetadata. The JSON of every message is pinned by
// a test (state.TaskKey and barrier.Barrier still travel as they are; the
// pinned JSON guards them too).
// Each message sets exactly one field; a stream that sends anything else,
// or anything before Register, ends with codes.InvalidArgument.
//
// # Liveness
//
// Both ends send a Heartbeat every HeartbeatInterval and watch the other:
// a peer silent for longer than HeartbeatTimeout (looked at every
// HeartbeatInterval, so noticed up to one interval later), or a broken
// stream, is lost. Any message counts, when it arrives, not when the
// handler gets to it. The
// coordinator then reports Handler.WorkerLost and ends the stream; the
// worker's RunWorker returns an error wrapping ErrCoordinatorLost. A lost
// session is not resumed: the worker may register again (same ID), and
// the coordinator redeploys.
//
// # Message flow of one attempt
//
//  1. Register: each worker sends Register (ID, data-plane address, job
//     graph fingerprint, slots) as its first message. The coordinator
//     rejects a different fingerprint (codes.FailedPrecondition), a
//     duplicate live ID (codes.AlreadyExists; RunWorker retries) and a
//     wrong Token (codes.Unauthenticated), and answers Registered.
//     Handler.WorkerJoined reports it; Server.WaitWorkers waits for n.
//  2. Deploy: the coordinator sends every worker the same Deploy: attempt
//     number, placement of every task, every worker's data address, and
//     the checkpoint to restore, if any. Each worker starts its tasks and
//     reports TaskStatus Running (later Finished, Failed or Canceled).
//  3. Checkpoints: coordinator.CheckpointCoordinator's TaskGateway becomes
//     TriggerCheckpoint messages to the workers holding source tasks; every
//     task answers Ack (snapshot and metrics) or Decline, which the
//     coordinator feeds to Acknowledge / Decline; the outcome goes back as
//     NotifyCheckpoint (Aborted or not) to every task.
//  4. Failure: a task reported Failed, or a lost worker, fails the attempt.
//     The coordinator sends CancelAttempt to the surviving workers, waits
//     for their tasks to stop, and sends a new Deploy with the next attempt
//     number and the latest completed checkpoint as Restore. Messages that
//     carry an older attempt number are stale and ignored.
//  5. Shutdown: when the job ends, the coordinator sends Shutdown (Close
//     does so to every worker); the worker's handler sees it last, then
//     RunWorker returns nil.
//
// # Profiling
//
// The coordinator may ask a worker for a CPU profile of its process:
// StartProfile (an ID and a length of at most a minute), answered by
// Profile (the profile in pprof's format, or why there is none). The
// worker records one at a time and stops early, without answering, on
// CancelProfile or when the session ends. These messages are optional:
// a worker lists FeatureProfile in Register.Features to receive them, so
// that a coordinator never sends them to a worker built before them,
// which could not decode them and would end its session.
//
// A highly available job's coordinators fail over: every command of the
// leader (Deploy, CancelAttempt, TriggerCheckpoint, NotifyCheckpoint,
// Commit) carries its Epoch, which grows with every new leader, and
// attempts count anew in each epoch. A worker serves the newest epoch that
// deployed on it and ends the session on a command of an older one (a
// deposed leader); it then finds the current leader and registers there.
// Epoch 0 is a coordinator without high availability.
//
// # Usage
//
// Coordinator: NewServer(cfg, handler), then Serve(ctx, listener) in its
// own goroutine; WaitWorkers; Send commands; react to Handler calls
// (WorkerJoined, Message, WorkerLost); Close.
//
// Worker: RunWorker(ctx, cfg, handler) blocks for the worker's life. The
// handler receives a Session (Connected) through which its tasks Send
// status, acks and declines from any goroutine, and every command in
// order (Command).
package cluster
