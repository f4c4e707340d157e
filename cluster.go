package weir

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/weirstream/weir/internal/jobmaster"
)

// ClusterConfig makes Execute (or Start) the coordinator of a job whose
// tasks run on worker processes: processes of the same program that build
// the same job and call RunWorker. The coordinator schedules the tasks
// onto the registered workers, triggers checkpoints and restarts the job
// from its latest completed checkpoint when a task fails or a worker is
// lost, on the workers that remain or rejoin. Workers exchange buffers
// directly over weir's TCP data plane (docs/protocol.md); the control plane is
// gRPC.
//
// Checkpoint files are written by the workers: CheckpointConfig.Dir must
// be a directory every process can read and write (a shared file system
// across machines). Sinks run on the workers, so Collect's values stay
// there: use files or external systems for results.
type ClusterConfig struct {
	// Listener, if set, is where workers connect; otherwise Listen is
	// listened on (e.g. "127.0.0.1:7000").
	Listener net.Listener
	Listen   string
	// Workers is how many workers must register before the job is
	// deployed, and how many a restart waits for, up to WorkerTimeout,
	// before it makes do with those alive (default 1).
	Workers int
	// WorkerTimeout bounds those waits (default 1 min).
	WorkerTimeout time.Duration
	// CancelTimeout bounds the wait for a failed attempt's tasks to stop
	// before the next attempt is deployed (default 30 s).
	CancelTimeout time.Duration
	// Token, if set, must be presented by every worker, on the control and
	// the data plane (WorkerConfig.Token).
	Token string
	// TLS, if set, secures the control plane (a server configuration; set
	// ClientAuth and ClientCAs for mutual TLS).
	TLS *tls.Config
	// HeartbeatInterval and HeartbeatTimeout detect lost workers
	// (defaults 1 s and 5 s).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// HA, if set, makes the job's coordinators fail over through etcd
	// (see HAConfig): run two or more coordinator processes of the job;
	// one leads, the others stand by.
	HA *HAConfig
}

// HAConfig makes a job highly available: its coordinators campaign for
// leadership in etcd, and when the leader dies or loses etcd another
// takes over and restores the job from its latest completed checkpoint.
// The leader records the checkpoint-ID counter and a pointer to each
// completed checkpoint in etcd, in a transaction that succeeds only while
// it still leads, and only then tells two-phase-commit sinks to commit. A
// new leader's epoch is greater than every earlier one, and workers refuse
// commands of an older epoch than they serve, so a deposed leader can
// neither commit nor reach the tasks. Workers find the leader through etcd
// (WorkerConfig.HA) and follow it.
//
// A coordinator whose term ends before the job (its lease lapsed, etcd
// was lost) returns an error wrapping ErrLeadershipLost from Execute; run
// it again to stand by again (a supervisor such as Kubernetes restarts
// it). A coordinator canceled through its context resigns, and another
// takes over at once. The job's end is recorded in etcd: the standby
// coordinators and the workers return when it ended.
type HAConfig struct {
	// Endpoints are etcd's client URLs (required), e.g.
	// "http://etcd:2379".
	Endpoints []string
	// JobID names the job in etcd (required; letters, digits, '.', '_'
	// and '-'): every coordinator and worker of the job uses the same,
	// and jobs sharing an etcd use different ones.
	JobID string
	// ID names this coordinator in the election (default: host name and
	// process ID).
	ID string
	// Advertise is this coordinator's control address as workers dial it
	// (default: the listener's address), e.g. "$(POD_IP):7000".
	Advertise string
	// ElectionTimeout is the leader's lease: a dead or partitioned leader
	// is replaced this long after its last renewal (default 5 s; whole
	// seconds).
	ElectionTimeout time.Duration
	// DialTimeout bounds the first contact with etcd, at Execute (default
	// 5 s).
	DialTimeout time.Duration
	// TLS, if set, secures the connection to etcd; Username and Password
	// authenticate to it.
	TLS                *tls.Config
	Username, Password string
}

func (h *HAConfig) config() jobmaster.HAConfig {
	return jobmaster.HAConfig{Endpoints: h.Endpoints, JobID: h.JobID, ElectionTimeout: h.ElectionTimeout,
		DialTimeout: h.DialTimeout, TLS: h.TLS, Username: h.Username, Password: h.Password}
}

// ErrLeadershipLost is wrapped by the error Execute returns on a
// coordinator of a highly available job whose term as leader ended before
// the job did; the job goes on under another coordinator.
var ErrLeadershipLost = jobmaster.ErrLeadershipLost

// spec returns c, with its defaults, for the runtime.
func (c *ClusterConfig) spec() *jobmaster.ClusterSpec {
	d := jobmaster.ClusterSpec{Listener: c.Listener, Listen: c.Listen, Workers: c.Workers, WorkerTimeout: c.WorkerTimeout,
		CancelTimeout: c.CancelTimeout, Token: c.Token, TLS: c.TLS, HeartbeatInterval: c.HeartbeatInterval, HeartbeatTimeout: c.HeartbeatTimeout}
	if h := c.HA; h != nil {
		d.HA = &jobmaster.HASpec{Config: h.config(), ID: h.ID, Advertise: h.Advertise}
	}
	if d.Workers == 0 {
		d.Workers = 1
	}
	if d.WorkerTimeout == 0 {
		d.WorkerTimeout = time.Minute
	}
	if d.CancelTimeout == 0 {
		d.CancelTimeout = 30 * time.Second
	}
	return &d
}

func (c *ClusterConfig) validate() error {
	switch {
	case c.Listener == nil && c.Listen == "":
		return errors.New("weir: cluster: no Listener or Listen address")
	case c.Workers < 0:
		return fmt.Errorf("weir: cluster: Workers %d must not be negative", c.Workers)
	case c.WorkerTimeout < 0 || c.CancelTimeout < 0:
		return errors.New("weir: cluster: negative timeout")
	}
	if c.HA != nil {
		if err := jobmaster.ValidateHA(c.HA.config()); err != nil {
			return fmt.Errorf("weir: cluster: %w", err)
		}
	}
	return jobmaster.ValidateHeartbeats(c.HeartbeatInterval, c.HeartbeatTimeout)
}

// WithCluster runs the job across worker processes (see ClusterConfig). It
// needs WithCheckpointing.
func WithCluster(c ClusterConfig) Option {
	return optionFunc(func(cfg *config) { cfg.cluster = &c })
}

// WorkerConfig configures RunWorker.
type WorkerConfig struct {
	// Coordinator is the coordinator's control address (host:port).
	Coordinator string
	// ID names the worker (default: a random UUID). A worker that lost
	// its coordinator may rejoin under the same ID.
	ID string
	// DataListen is the data plane's listen address (default
	// "127.0.0.1:0"); other workers connect to it.
	DataListen string
	// DataAdvertise is the data plane's address as other workers dial it
	// (default: the listener's address), e.g. "$(POD_IP):7001" when
	// DataListen is ":7001".
	DataAdvertise string
	// Token must match ClusterConfig.Token.
	Token string
	// TLS, if set, secures the control plane (a client configuration).
	TLS *tls.Config
	// DataTLS, if set, secures the data plane both ways: the worker serves
	// its partitions with DataTLS.Certificates and dials other workers
	// trusting DataTLS.RootCAs (the dialled host is the server name). For
	// mutual TLS set ClientAuth and ClientCAs too; certificates then need
	// both server and client authentication usage. All workers of a job
	// must agree.
	DataTLS *tls.Config
	// HeartbeatInterval and HeartbeatTimeout detect a lost coordinator
	// (defaults 1 s and 5 s).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// HA, if set, finds the job's leading coordinator through etcd
	// (Coordinator is then unused) and follows the next leader when it
	// changes, until etcd records the job's end. The same Endpoints and
	// JobID as the coordinators' (ID and Advertise are unused).
	HA *HAConfig
}

// RunWorker runs this process as a worker of the job built in e, whose
// coordinator is another process of the same program running Execute with
// WithCluster: it registers, runs the tasks the coordinator deploys here,
// serves their output to the other workers and reads theirs. It returns
// nil when the coordinator shuts it down (the job ended), ctx.Err() when
// ctx ends, or an error when the coordinator is lost. A process that built
// a different job than the coordinator is refused with an error wrapping
// ErrOtherJob.
func (e *Environment) RunWorker(ctx context.Context, wc WorkerConfig) error {
	spec, err := e.spec()
	if err != nil {
		return err
	}
	ws := jobmaster.WorkerSpec{Coordinator: wc.Coordinator, ID: wc.ID, DataListen: wc.DataListen, DataAdvertise: wc.DataAdvertise,
		Token: wc.Token, TLS: wc.TLS, DataTLS: wc.DataTLS, HeartbeatInterval: wc.HeartbeatInterval, HeartbeatTimeout: wc.HeartbeatTimeout}
	if wc.HA != nil {
		c := wc.HA.config()
		if err := jobmaster.ValidateHA(c); err != nil {
			return fmt.Errorf("weir: worker: %w", err)
		}
		ws.HA = &c
	} else if wc.Coordinator == "" {
		return errors.New("weir: worker: no Coordinator address and no HA")
	}
	err = jobmaster.RunWorker(ctx, spec, ws)
	if errors.Is(err, jobmaster.ErrOtherJob) {
		return otherJobError{err}
	}
	return err
}

// ErrOtherJob is returned (wrapped) by RunWorker when the coordinator runs
// another job than this process built (another graph or checkpointing
// mode).
var ErrOtherJob = errors.New("weir: worker: this process built a different job than the coordinator")

// otherJobError is the runtime's refusal of a worker that built another
// job, as an ErrOtherJob.
type otherJobError struct{ err error }

func (e otherJobError) Error() string        { return e.err.Error() }
func (e otherJobError) Is(target error) bool { return target == ErrOtherJob }
func (e otherJobError) Unwrap() error        { return e.err }
