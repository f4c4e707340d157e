// Package jobmaster runs a job: it deploys the job's tasks attempt by
// attempt, drives checkpointing through the checkpoint coordinator, and
// fails over. It is weir's counterpart of Flink's JobMaster and scheduler;
// the checkpoint coordinator itself (package coordinator) only tracks
// checkpoints.
//
// An Attempt is one deployment of every task of the job: in this process
// (deploy.Deployment) or spread over worker processes (a cluster attempt,
// whose tasks run in workers that RunWorker serves). The failover loop
// deploys an attempt from the latest restore point, attaches the
// coordinator to it, runs it, and on a failure detaches the coordinator,
// settles what finished sinks had left to commit, asks the restart
// strategy, and deploys the next attempt. Finished two-phase-commit sinks
// register their last transactions in FinalCommits; the job commits them
// once the whole job finished, and after a failure commits those of
// completed checkpoints and aborts the rest.
//
// Start runs a job in the background and returns its Job handle; for
// jobs across processes, the coordinator process runs Start with a
// ClusterSpec and every worker process RunWorker with the same graph.
package jobmaster
