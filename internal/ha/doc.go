// Package ha is a job's high-availability record on etcd: leader election
// among the job's coordinators and what a new leader needs to take over.
//
// A Leadership is one coordinator's term as the job's leader: it won the
// job's election (etcd's concurrency election, on a lease of
// Config.ElectionTimeout) and holds it until its lease ends, it resigns,
// or one of its writes fails. Its epoch is the revision at which its
// election key was created: epochs grow with every new leader, and
// workers reject commands of an epoch older than the one they serve.
//
// Every write of a leader is a transaction guarded by its election key (it
// succeeds only while that key still exists at its creation revision), so
// a deposed or partitioned leader cannot change the record:
//
//	/weir/jobs/<job>/leader/<lease>   the election; its value names the leader (ID, control address)
//	/weir/jobs/<job>/counter          the highest checkpoint ID a leader may have triggered
//	/weir/jobs/<job>/checkpoint       the pointer to the latest completed checkpoint (ID, epoch, previous)
//	/weir/jobs/<job>/status           the job's end (finished or failed), once it ended
//
// A coordinator reserves a checkpoint ID in the counter before it triggers
// that checkpoint, and moves the pointer when the checkpoint's metadata is
// written, before it tells two-phase-commit sinks to commit. A new leader
// continues after the counter and restores from the pointer. The
// checkpoint's files stay in checkpoint storage; etcd holds only these few
// keys per job.
package ha
