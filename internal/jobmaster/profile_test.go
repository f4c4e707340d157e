package jobmaster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/internal/dashboard"
	"github.com/weirstream/weir/internal/metrics"
)

// The coordinator refuses a worker's CPU profile before sending anything
// when it cannot be taken: an unknown worker, a worker whose Register did
// not list cluster.FeatureProfile (an older weir, which could not decode
// the message and would end its session), one in flight on that worker,
// a length out of bounds.
func TestProfileWorkerRefusals(t *testing.T) {
	j := &clusterJob{log: zap.NewNop()}
	j.mu.workers = map[string]*metrics.Worker{}
	j.mu.profilable, j.mu.profiles = map[string]bool{}, map[string]*pendingProfile{}
	j.WorkerJoined(cluster.WorkerInfo{ID: "old"})
	j.WorkerJoined(cluster.WorkerInfo{ID: "new", Features: []string{"other", cluster.FeatureProfile}})
	j.mu.profiles["new"] = &pendingProfile{id: 1}
	ctx := context.Background()

	_, err := j.profileWorker(ctx, "w9", time.Second)
	require.ErrorIs(t, err, dashboard.ErrNoWorker)
	_, err = j.profileWorker(ctx, "old", time.Second)
	require.ErrorIs(t, err, dashboard.ErrConflict)
	require.ErrorContains(t, err, "records no CPU profile")
	_, err = j.profileWorker(ctx, "new", time.Second)
	require.ErrorIs(t, err, dashboard.ErrProfileBusy)
	require.ErrorContains(t, err, "on worker new")
	for _, d := range []time.Duration{0, time.Minute + time.Millisecond} {
		_, err = j.profileWorker(ctx, "new", d)
		require.ErrorContains(t, err, "not "+d.String())
	}

	// The worker's loss ends the profile in flight.
	p := j.mu.profiles["new"]
	p.gone = make(chan struct{})
	j.WorkerLost("new", cluster.ErrHeartbeatTimeout)
	<-p.gone
	require.ErrorIs(t, p.err, cluster.ErrHeartbeatTimeout)
	require.Empty(t, j.mu.profiles)
	require.NotContains(t, j.mu.profilable, "new")
}
