// Package deploy turns a job graph into running tasks in this process: one
// attempt of a job, or the part of it that one worker process runs.
//
// For every task Placement puts here, Deploy creates its output partitions
// (one per outgoing edge, with one subpartition per consumer subtask), its
// input gate with one channel per producer subtask it reads, and the
// task with its operator chain. A channel is local (buffers handed over
// in memory) when the producer's partition and every consumer run in this
// process, and remote otherwise: the partition is then served by this
// process's DataPlane over weir's TCP protocol (docs/protocol.md) and read
// through credit-based remote channels.
//
// Under a test harness (Config.Harness, weir.WithTestHarness) Deploy also
// wraps every operator subtask in the harness's probe: before each record
// it processes (or a source emits), before its snapshots and its
// checkpoint-complete notifications, and before each poll of a source,
// which the probe may hold. Without a harness nothing is wrapped.
//
// The caller's duties, in order:
//
//  1. Create the process's network buffer pool (NewNetworkPool) and, for
//     exchanges over TCP, its DataPlane (StartDataPlane); both outlive
//     attempts.
//  2. For each attempt: Deploy with the attempt's Placement (fresh
//     partition IDs per attempt number) and, after a failure, the
//     RestorePoint to restore from.
//  3. Deployment.Run runs every task until all finished, one failed or the
//     context ended, and tears the attempt's exchanges down.
//  4. At the end: DataPlane.Close, then CheckLeaks on the pool.
package deploy
