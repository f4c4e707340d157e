package cluster_test

import (
	"context"
	"fmt"
	"net"

	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/state"
)

// coordinatorEvents is the coordinator's Handler: it forwards task status
// to the example's main goroutine.
type coordinatorEvents struct{ status chan cluster.TaskStatus }

func (coordinatorEvents) WorkerJoined(cluster.WorkerInfo) {}
func (coordinatorEvents) WorkerLost(string, error)        {}
func (e coordinatorEvents) Message(_ string, m cluster.WorkerMessage) {
	if m.TaskStatus != nil {
		e.status <- *m.TaskStatus
	}
}

// taskRunner is a worker's handler: it "runs" the tasks deployed to it
// and reports them Running.
type taskRunner struct{ s *cluster.Session }

func (r *taskRunner) Connected(s *cluster.Session) { r.s = s }

func (r *taskRunner) Command(ctx context.Context, m cluster.CoordinatorMessage) error {
	switch {
	case m.Deploy != nil:
		for _, a := range m.Deploy.Tasks {
			if a.WorkerID == r.s.WorkerID() {
				err := r.s.Send(ctx, cluster.WorkerMessage{TaskStatus: &cluster.TaskStatus{
					Attempt: m.Deploy.Attempt, Task: a.Task, State: cluster.Running}})
				if err != nil {
					return err
				}
			}
		}
	case m.Shutdown != nil:
		fmt.Println("worker: shutdown:", m.Shutdown.Reason)
	}
	return nil
}

// Example runs a coordinator and one worker in one process over loopback:
// the worker registers, the coordinator deploys a task to it, the worker
// reports it running, and the coordinator shuts the worker down.
func Example() {
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	events := coordinatorEvents{status: make(chan cluster.TaskStatus, 1)}
	srv, err := cluster.NewServer(cluster.ServerConfig{Fingerprint: "job-graph-hash", Token: "secret"}, events)
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()

	worked := make(chan error, 1)
	go func() {
		worked <- cluster.RunWorker(ctx, cluster.WorkerConfig{
			Coordinator: lis.Addr().String(),
			Token:       "secret",
			Register:    cluster.Register{WorkerID: "w1", DataAddr: "127.0.0.1:7100", Fingerprint: "job-graph-hash", Slots: 2},
		}, &taskRunner{})
	}()

	workers, err := srv.WaitWorkers(ctx, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println("coordinator: joined:", workers[0].ID, workers[0].DataAddr)
	task := state.TaskKey{Vertex: "source", Subtask: 0}
	err = srv.Send(ctx, "w1", cluster.CoordinatorMessage{Deploy: &cluster.Deploy{
		Attempt:   1,
		JobID:     "example",
		Tasks:     []cluster.Assignment{{Task: task, WorkerID: "w1"}},
		DataAddrs: map[string]string{"w1": workers[0].DataAddr},
	}})
	if err != nil {
		panic(err)
	}
	st := <-events.status
	fmt.Printf("coordinator: attempt %d task %s/%d %s\n", st.Attempt, st.Task.Vertex, st.Task.Subtask, st.State)

	if err := srv.Send(ctx, "w1", cluster.CoordinatorMessage{Shutdown: &cluster.Shutdown{Reason: "job finished"}}); err != nil {
		panic(err)
	}
	fmt.Println("worker returned:", <-worked)
	fmt.Println("close:", srv.Close(), "serve returned:", <-served)
	// Output:
	// coordinator: joined: w1 127.0.0.1:7100
	// coordinator: attempt 1 task source/0 running
	// worker: shutdown: job finished
	// worker returned: <nil>
	// close: <nil> serve returned: <nil>
}
