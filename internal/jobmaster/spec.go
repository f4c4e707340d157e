package jobmaster

import (
	"crypto/tls"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// Spec is everything needed to run one job, already validated by the user
// API.
type Spec struct {
	Graph   *graph.JobGraph
	Deploy  deploy.Config
	Network buffer.Config
	// TCP makes every exchange of an in-process job go over loopback TCP.
	TCP bool
	// Checkpoint turns checkpointing on (nil: off).
	Checkpoint *CheckpointSpec
	// Restart decides whether and when a failed job restarts (nil: the
	// default, see DefaultRestartStrategy). Only with checkpointing.
	Restart coordinator.RestartStrategy
	// Final collects the end-of-job commits of two-phase-commit sinks
	// (nil: none).
	Final *FinalCommits
	// Cluster makes this process the coordinator of a job whose tasks run
	// on workers (nil: in-process). It needs checkpointing.
	Cluster *ClusterSpec
	// Metrics configures the job's live metrics, dashboard and
	// Prometheus endpoint.
	Metrics MetricsSpec
	// Options are the job's settings in effect, by name, as the REST API
	// shows them (GET /jobs/{jobid}/config); no secrets.
	Options map[string]string
	Logger  *zap.Logger
}

// CheckpointSpec configures checkpointing.
type CheckpointSpec struct {
	Coordinator coordinator.Config
	// Storage, if set, is the checkpoint storage; otherwise checkpoints go
	// to Dir, or to a private temporary directory removed at the end.
	Storage state.Storage
	Dir     string
	// RestoreFrom is a savepoint, a chk-N directory or a checkpoint
	// directory to start from ("": a fresh start).
	RestoreFrom string
	// AllowNonRestoredState drops (and logs) the state of RestoreFrom's
	// operators that the job does not have, instead of failing the
	// start.
	AllowNonRestoredState bool
	// JobID names the job's place in Dir (Dir/JobID/chk-N). Empty: the
	// job ID of the checkpoint RestoreFrom names if it lies in Dir (the
	// job continues there), else a new random one.
	JobID string
	// SavepointDir is where savepoints triggered without a directory go
	// (the REST API's; "": a directory is required).
	SavepointDir string
}

// ClusterSpec configures the coordinator side of a job across processes.
type ClusterSpec struct {
	Listener          net.Listener // if nil, Listen is listened on
	Listen            string
	Workers           int
	WorkerTimeout     time.Duration
	CancelTimeout     time.Duration
	Token             string
	TLS               *tls.Config
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// HA makes the coordinators of the job fail over (nil: one coordinator).
	HA *HASpec
}

// HAConfig says where a highly available job's record lives in etcd.
type HAConfig = ha.Config

// ValidateHA reports what is wrong with c.
func ValidateHA(c HAConfig) error { return c.Validate() }

// HASpec configures a coordinator of a highly available job.
type HASpec struct {
	Config ha.Config
	// ID names this coordinator in the election; Advertise is the control
	// address workers dial (default: the listener's).
	ID, Advertise string
}

// WorkerSpec configures a worker process.
type WorkerSpec struct {
	// HA, if set, finds the coordinator through etcd (Coordinator is then
	// unused) and follows it when another takes over.
	HA                *ha.Config
	Coordinator       string
	ID                string
	DataListen        string
	DataAdvertise     string // default: the data listener's address
	Token             string
	TLS               *tls.Config
	DataTLS           *tls.Config
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
}

// Result is what a finished job reports.
type Result struct {
	Tasks          []task.Metrics // of the last attempt
	Duration       time.Duration
	Restarts       int
	Checkpoints    *coordinator.Stats // nil without checkpointing
	LeakedSegments int
}

// DefaultRestartStrategy is the restart strategy of a checkpointed job
// without one: 10 attempts, 100 ms apart.
func DefaultRestartStrategy() coordinator.RestartStrategy {
	fd, err := coordinator.NewFixedDelay(coordinator.FixedDelayConfig{Attempts: 10, Delay: 100 * time.Millisecond})
	if err != nil {
		panic(err) // a constant configuration
	}
	return fd
}

// ValidateHeartbeats checks the heartbeat settings of a cluster (zero
// values mean the defaults).
func ValidateHeartbeats(interval, timeout time.Duration) error {
	return cluster.ServerConfig{HeartbeatInterval: interval, HeartbeatTimeout: timeout}.Validate()
}
