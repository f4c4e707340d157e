package jobmaster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/state"
)

// A worker serves the newest leader epoch that deployed on it and refuses
// (ending the session with ErrStaleEpoch) every command of an older one:
// a deposed leader can neither deploy, trigger, notify, cancel nor
// commit. Messages without an epoch (Shutdown) and commands of a
// coordinator without high availability (epoch 0 on a worker that never
// saw another) pass.
func TestWorkerFencesOlderEpochs(t *testing.T) {
	w := &worker{log: zap.NewNop(), commands: newSerialQueue()}
	defer w.commands.close()
	ctx := context.Background()
	src := state.TaskKey{Vertex: "src", Subtask: 0}
	trigger := func(e cluster.Epoch) cluster.CoordinatorMessage {
		return cluster.CoordinatorMessage{TriggerCheckpoint: &cluster.TriggerCheckpoint{Attempt: 0, Epoch: e, Task: src,
			Barrier: barrier.Barrier{ID: 1}}}
	}
	deploy := func(e cluster.Epoch) cluster.CoordinatorMessage {
		// A job ID that does not parse: the deployment fails at once, and
		// the worker serves the epoch all the same.
		return cluster.CoordinatorMessage{Deploy: &cluster.Deploy{Attempt: 0, Epoch: e, JobID: "x"}}
	}
	require.NoError(t, w.Command(ctx, trigger(0)), "no high availability: nothing to fence")
	require.NoError(t, w.Command(ctx, deploy(5)))
	for name, m := range map[string]cluster.CoordinatorMessage{
		"deploy":  deploy(4),
		"trigger": trigger(4),
		"notify":  {NotifyCheckpoint: &cluster.NotifyCheckpoint{Epoch: 4, Task: src, ID: 1}},
		"cancel":  {CancelAttempt: &cluster.CancelAttempt{Epoch: 4}},
		"commit":  {Commit: &cluster.Commit{Epoch: 4, Commit: true}},
		"no ha":   trigger(0),
	} {
		require.ErrorIs(t, w.Command(ctx, m), ErrStaleEpoch, name)
	}
	require.NoError(t, w.Command(ctx, trigger(5)))
	require.NoError(t, w.Command(ctx, cluster.CoordinatorMessage{Shutdown: &cluster.Shutdown{Reason: "x"}}))
	require.NoError(t, w.Command(ctx, deploy(7)))
	require.ErrorIs(t, w.Command(ctx, trigger(5)), ErrStaleEpoch)
	require.NoError(t, w.Command(ctx, trigger(7)))
}
