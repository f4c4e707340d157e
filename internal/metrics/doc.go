// Package metrics turns a running job's task metrics into live
// snapshots with Flink's metric names, and exposes them to Prometheus.
//
// The central noun is the Job snapshot: the job's state, restarts and
// checkpoints, and per vertex and subtask the record and byte counters,
// their rates per second, busy, idle and back-pressured time per second,
// buffer usage, checkpoint alignment and watermarks. A Sampler builds one
// every interval from a Source (the job master: the running attempt's
// tasks, read without their locks, or the reports of remote workers; the
// job's status; the checkpoint coordinator's statistics) and publishes
// it atomically: the dashboard, the Prometheus Collector, the progress
// line and Job.Metrics read the latest snapshot and never reach a task.
//
// The caller's duties, in order:
//
//  1. NewSampler with the job's Plan (PlanOf its graph) and a Source.
//  2. Run it in a goroutine the job owns, for as long as the job runs;
//     it samples a last time when its context ends.
//  3. Read Latest from anywhere; register NewCollector(sampler.Latest)
//     in a Prometheus registry.
//
// Rates are averages over the last few samples of a task and use the
// task's own running time, so that a task stuck in a wait, or a worker
// whose report arrived late, still yields exact rates.
package metrics
