package coordinator

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// nopGateway only serves as the identity carried in effects.
type nopGateway struct{}

func (nopGateway) TriggerCheckpoint(state.TaskKey, barrier.Barrier) error       { return nil }
func (nopGateway) NotifyCheckpointComplete(state.TaskKey, barrier.CheckpointID) {}
func (nopGateway) NotifyCheckpointAborted(state.TaskKey, barrier.CheckpointID)  {}

func parseTask(s string) state.TaskKey {
	v, n, _ := strings.Cut(s, "/")
	i, _ := strconv.Atoi(n)
	return state.TaskKey{Vertex: v, Subtask: i}
}

func parseTasks(s string) []state.TaskKey {
	var ts []state.TaskKey
	for _, f := range strings.Split(s, ",") {
		ts = append(ts, parseTask(f))
	}
	return ts
}

var reasonNames = []struct {
	err  error
	name string
}{
	{ErrTooManyFailures, "too-many-failures"},
	{ErrDeclined, "declined"}, {ErrExpired, "expired"}, {ErrFinalize, "finalize"},
	{ErrTriggerFailed, "trigger-failed"}, {ErrSubsumed, "subsumed"}, {ErrDetached, "detached"},
	{ErrClosed, "closed"}, {ErrNotAttached, "not-attached"}, {ErrAttached, "attached"}, {ErrStopping, "stopping"},
}

func reasonName(err error) string {
	for _, r := range reasonNames {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return err.Error()
}

// render prints effects compactly; notifications to every task of one
// checkpoint collapse into one line with a count.
func render(effs []effect) string {
	var out []string
	for i := 0; i < len(effs); i++ {
		switch e := effs[i].(type) {
		case triggerTask:
			out = append(out, fmt.Sprintf("trigger %d %s/%d %v", e.barrier.ID, e.task.Vertex, e.task.Subtask, e.barrier.Options.Kind))
		case notifyComplete, notifyAborted:
			name, id := "complete", barrier.CheckpointID(0)
			if n, ok := e.(notifyComplete); ok {
				id = n.id
			} else {
				name, id = "aborted", e.(notifyAborted).id
			}
			n := 1
			for i+1 < len(effs) && fmt.Sprintf("%T", effs[i+1]) == fmt.Sprintf("%T", e) {
				var next barrier.CheckpointID
				switch f := effs[i+1].(type) {
				case notifyComplete:
					next = f.id
				case notifyAborted:
					next = f.id
				}
				if next != id {
					break
				}
				n++
				i++
			}
			out = append(out, fmt.Sprintf("%s %d x%d", name, id, n))
		case persist:
			if e.meta.Kind == barrier.Savepoint {
				out = append(out, fmt.Sprintf("export %d %s", e.meta.ID, e.dir))
			} else {
				out = append(out, fmt.Sprintf("persist %d", e.meta.ID))
			}
		case discard:
			out = append(out, fmt.Sprintf("discard %d", e.id))
		case resolve:
			if e.err != nil {
				out = append(out, fmt.Sprintf("resolve r%d %s", e.req, reasonName(e.err)))
			} else {
				out = append(out, fmt.Sprintf("resolve r%d ok %d", e.req, e.meta.ID))
			}
		case failJob:
			out = append(out, "failjob "+reasonName(e.err))
		}
	}
	return strings.Join(out, "; ")
}

// script drives a core. Each line is "command args [@offset] => effects".
//
//	attach [sources=a/0] [all=a/0,b/0] [delay=D] [running=none]  (default: s/0 of s/0,m/0,k/0, all running)
//	running TASK
//	tick, detach, shutdown STATUS
//	ack ID TASK | ackall ID | decline ID TASK [reason=snapshot|notready|finished|canceled] | triggerfail ID TASK
//	persisted ID [fail] [path=P]
//	request REQ [savepoint DIR] | cancel REQ | restore ID [savepoint] [unclaimed]
//	latest => ID  |  pending => N  |  next => offset
type script struct {
	t   *testing.T
	c   *core
	att *attempt
}

func runScript(t *testing.T, cfg Config, lines []string) *core {
	t.Helper()
	require.NoError(t, cfg.Validate())
	s := &script{t: t, c: newCore(cfg)}
	for _, line := range lines {
		cmd, want, _ := strings.Cut(line, "=>")
		got := s.step(strings.TrimSpace(cmd))
		require.Equal(t, strings.TrimSpace(want), got, "after %q", cmd)
	}
	return s.c
}

func (s *script) step(cmd string) string {
	now := t0
	var args []string
	kv := map[string]string{}
	for _, f := range strings.Fields(cmd) {
		switch {
		case strings.HasPrefix(f, "@"):
			d, err := time.ParseDuration(f[1:])
			require.NoError(s.t, err)
			now = t0.Add(d)
		case strings.Contains(f, "="):
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		default:
			args = append(args, f)
		}
	}
	id := func(i int) barrier.CheckpointID {
		n, err := strconv.ParseUint(args[i], 10, 64)
		require.NoError(s.t, err)
		return barrier.CheckpointID(n)
	}
	c := s.c
	switch args[0] {
	case "attach":
		srcs, all := "s/0", "s/0,m/0,k/0"
		if v, ok := kv["sources"]; ok {
			srcs = v
		}
		if v, ok := kv["all"]; ok {
			all = v
		}
		a, err := newAttempt(parseTasks(srcs), parseTasks(all), nopGateway{})
		require.NoError(s.t, err)
		var delay time.Duration
		if v, ok := kv["delay"]; ok {
			delay, err = time.ParseDuration(v)
			require.NoError(s.t, err)
		}
		if err := c.attach(a, now, delay); err != nil {
			return reasonName(err)
		}
		s.att = a
		if kv["running"] != "none" {
			// Most scripts start with every task running.
			for _, task := range a.all {
				c.taskRunning(task, now)
			}
		}
	case "running":
		c.taskRunning(parseTask(args[1]), now)
	case "tick":
		c.tick(now)
	case "detach":
		c.detach(errors.New("task failed"), now)
	case "shutdown":
		st := map[string]JobStatus{"finished": JobFinished, "canceled": JobCanceled, "failed": JobFailed, "suspended": JobSuspended}[args[1]]
		c.shutdown(st, now)
	case "ack":
		o := c.ack(parseTask(args[2]), id(1), snap(10), TaskCheckpointMetrics{}, now)
		if o != ackAccepted && o != ackLast {
			return o.String() + prefix(render(c.ready()))
		}
	case "ackall":
		p := c.pending[id(1)]
		require.NotNil(s.t, p, "checkpoint %d not pending", id(1))
		for _, task := range p.att.all {
			if _, done := p.acks[task]; !done {
				c.ack(task, id(1), snap(10), TaskCheckpointMetrics{AlignmentDuration: time.Millisecond}, now)
			}
		}
	case "decline":
		var reason error = errors.New("no")
		if v, ok := kv["reason"]; ok {
			r := map[string]barrier.DeclineReason{"snapshot": barrier.DeclineSnapshotFailed, "notready": barrier.DeclineTaskNotReady,
				"finished": barrier.DeclineTaskFinished, "canceled": barrier.DeclineTaskCanceled}[v]
			require.NotZero(s.t, r, "unknown decline reason %q", v)
			reason = barrier.Decline(r, nil)
		}
		c.decline(parseTask(args[2]), id(1), reason, now)
	case "triggerfail":
		c.triggerFailed(parseTask(args[2]), id(1), errors.New("gone"), now)
	case "persisted":
		var err error
		if len(args) > 2 && args[2] == "fail" {
			err = errors.New("disk full")
		}
		c.persisted(id(1), kv["path"], err, now)
	case "request":
		n, _ := strconv.Atoi(strings.TrimPrefix(args[1], "r"))
		r := request{id: requestID(n), kind: barrier.Checkpoint}
		if len(args) > 2 && args[2] == "savepoint" {
			r.kind, r.dir = barrier.Savepoint, args[3]
			r.terminal = len(args) > 4 && args[4] == "terminal"
		}
		c.request(r, now)
	case "cancel":
		n, _ := strconv.Atoi(strings.TrimPrefix(args[1], "r"))
		return strconv.FormatBool(c.cancelRequest(requestID(n)))
	case "restore":
		m := state.Metadata{ID: id(1), Kind: barrier.Checkpoint}
		if len(args) > 2 && args[2] == "savepoint" {
			m.Kind = barrier.Savepoint
		}
		claim := len(args) <= 2 || args[len(args)-1] != "unclaimed"
		if err := c.restore(m, claim); err != nil {
			return reasonName(err)
		}
	case "latest":
		m, ok := c.latest()
		if !ok {
			return "none"
		}
		return fmt.Sprintf("%d %v", m.ID, m.Kind)
	case "pending":
		return strconv.Itoa(len(c.pending))
	case "next":
		d, ok := c.nextDeadline()
		if !ok {
			return "none"
		}
		return d.Sub(t0).String()
	default:
		s.t.Fatalf("unknown command %q", cmd)
	}
	return render(c.ready())
}

func prefix(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

func snap(size int64) state.TaskSnapshot {
	return state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
		"op": {Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: "f", Size: size}}},
	}}
}

func TestCore(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		script []string
	}{
		{
			name: "periodic interval off: no triggers ever",
			cfg:  Config{},
			script: []string{
				"attach delay=5s =>",
				"next => none",
				"tick @24h =>",
			},
		},
		{
			name: "periodic at fixed rate after the initial delay",
			cfg:  Config{Interval: 10 * time.Second},
			script: []string{
				"attach delay=3s =>",
				"next => 3s",
				"tick @2999ms =>",
				"tick @3s => trigger 1 s/0 checkpoint",
				"ackall 1 @4s => persist 1",
				"persisted 1 @4s => complete 1 x3",
				"next => 13s",
				"tick @13s => trigger 2 s/0 checkpoint",
				"pending => 1",
			},
		},
		{
			name: "completion: metadata, then retention, then notify",
			cfg:  Config{Interval: time.Second, Retained: 2},
			script: []string{
				"attach delay=1s =>",
				"tick @1s => trigger 1 s/0 checkpoint",
				"ack 1 s/0 =>",
				"ack 1 m/0 =>",
				"ack 1 k/0 => persist 1",
				"latest => none",
				"persisted 1 @1100ms => complete 1 x3",
				"latest => 1 checkpoint",
				"tick @2s => trigger 2 s/0 checkpoint",
				"ackall 2 => persist 2",
				"persisted 2 @2100ms => complete 2 x3",
				"tick @3s => trigger 3 s/0 checkpoint",
				"ackall 3 => persist 3",
				"persisted 3 @3100ms => discard 1; complete 3 x3",
				"latest => 3 checkpoint",
			},
		},
		{
			name: "min pause defers the periodic trigger to when it is allowed",
			cfg:  Config{Interval: 10 * time.Second, MinPause: 8 * time.Second},
			script: []string{
				"attach delay=10s =>",
				"tick @10s => trigger 1 s/0 checkpoint",
				"ackall 1 @15s => persist 1",
				"persisted 1 @15s => complete 1 x3",
				"tick @20s =>", // 15s+8s = 23s
				"next => 23s",
				"tick @22999ms =>",
				"tick @23s => trigger 2 s/0 checkpoint",
				"next => 33s", // timeout 10m later; the fixed rate restarts at 23s
			},
		},
		{
			name: "max concurrent: a periodic trigger waits for a free slot, then min pause",
			cfg:  Config{Interval: 10 * time.Second, MinPause: 5 * time.Second},
			script: []string{
				"attach delay=10s =>",
				"tick @10s => trigger 1 s/0 checkpoint",
				"tick @20s =>", // deferred: 1 is pending
				"tick @30s =>", // coalesced with the deferred one
				"ackall 1 @31s => persist 1",
				"persisted 1 @31s => complete 1 x3",
				"next => 36s",
				"tick @36s => trigger 2 s/0 checkpoint",
				"pending => 1",
			},
		},
		{
			name: "max concurrent 2 without min pause",
			cfg:  Config{Interval: 10 * time.Second, MaxConcurrent: 2},
			script: []string{
				"attach delay=10s =>",
				"tick @10s => trigger 1 s/0 checkpoint",
				"tick @20s => trigger 2 s/0 checkpoint",
				"tick @30s =>",
				"ackall 2 @35s => persist 2",
				// 2 completes: 1 is subsumed, the deferred trigger starts 3
				"persisted 2 @35s => aborted 1 x3; discard 1; complete 2 x3; trigger 3 s/0 checkpoint",
				"pending => 1",
			},
		},
		{
			name: "timeout aborts, counts, and fails the job beyond tolerable",
			cfg:  Config{Interval: time.Minute, Timeout: 30 * time.Second, TolerableFailures: 1},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"next => 1m30s",
				"tick @1m29s =>",
				"tick @1m30s => aborted 1 x3; discard 1",
				"tick @2m => trigger 2 s/0 checkpoint",
				"tick @2m30s => aborted 2 x3; discard 2; failjob too-many-failures",
				// the counter starts over after a job failure
				"tick @3m => trigger 3 s/0 checkpoint",
				"tick @3m30s => aborted 3 x3; discard 3",
			},
		},
		{
			name: "tolerable 0: the first failure fails the job",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"decline 1 m/0 => aborted 1 x3; discard 1; failjob too-many-failures",
			},
		},
		{
			name: "a success resets the consecutive count",
			cfg:  Config{Interval: time.Minute, TolerableFailures: 1},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"decline 1 k/0 => aborted 1 x3; discard 1",
				"tick @2m => trigger 2 s/0 checkpoint",
				"ackall 2 => persist 2",
				"persisted 2 => complete 2 x3",
				"tick @3m => trigger 3 s/0 checkpoint",
				"decline 3 k/0 => aborted 3 x3; discard 3",
				"tick @4m => trigger 4 s/0 checkpoint",
				"decline 4 k/0 => aborted 4 x3; discard 4; failjob too-many-failures",
			},
		},
		{
			name: "decline: unknown task and non-pending ids are ignored",
			cfg:  Config{Interval: time.Minute, TolerableFailures: 5},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"decline 1 x/9 =>",
				"decline 7 m/0 =>",
				"decline 1 m/0 => aborted 1 x3; discard 1",
				"decline 1 k/0 =>",
			},
		},
		{
			name: "late, duplicate and unknown acks",
			cfg:  Config{Interval: time.Minute, TolerableFailures: 5},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"ack 1 s/0 =>",
				"ack 1 s/0 => duplicate",
				"ack 1 x/0 => unknown-task",
				"ack 9 s/0 => unknown-id",
				"ack 0 s/0 => unknown-id",
				"decline 1 m/0 => aborted 1 x3; discard 1",
				"ack 1 k/0 => late discard 1", // its state is discarded
				"tick @2m => trigger 2 s/0 checkpoint",
				"ackall 2 => persist 2",
				"ack 2 s/0 => duplicate", // finalizing: ignored
				"persisted 2 => complete 2 x3",
				"ack 2 m/0 => unknown-id", // completed: never discarded
				"latest => 2 checkpoint",
			},
		},
		{
			name: "metadata write fails: counted, previous completed untouched",
			cfg:  Config{Interval: time.Minute, TolerableFailures: 1},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"ackall 1 => persist 1",
				"persisted 1 => complete 1 x3",
				"tick @2m => trigger 2 s/0 checkpoint",
				"ackall 2 => persist 2",
				"persisted 2 fail => aborted 2 x3; discard 2",
				"latest => 1 checkpoint",
				"tick @3m => trigger 3 s/0 checkpoint",
				"ackall 3 => persist 3",
				"persisted 3 fail => aborted 3 x3; discard 3; failjob too-many-failures",
				"latest => 1 checkpoint",
			},
		},
		{
			name: "aborted while its metadata is being written",
			cfg:  Config{Interval: time.Minute, Timeout: 10 * time.Second},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"ackall 1 @1m5s => persist 1",
				"tick @1m10s => aborted 1 x3; discard 1; failjob too-many-failures",
				"persisted 1 => discard 1",
				"latest => none",
			},
		},
		{
			name: "savepoint: not held back, not retained, not a restore point, not counted",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"request r1 savepoint /sp @1m1s => trigger 2 s/0 savepoint",
				"pending => 2",
				"ackall 2 => export 2 /sp",
				"persisted 2 path=/sp/sp-2 @1m2s => discard 2; resolve r1 ok 2", // no side effects committed
				"ackall 1 => persist 1",
				"persisted 1 => complete 1 x3",
				"latest => 1 checkpoint",
				"request r2 savepoint /sp @1m30s => trigger 3 s/0 savepoint",
				"decline 3 m/0 => aborted 3 x3; discard 3; resolve r2 declined", // no failjob
				"tick @2m => trigger 4 s/0 checkpoint",
				"ackall 4 => persist 4",
				"persisted 4 => discard 1; complete 4 x3",
			},
		},
		{
			name: "a savepoint is never subsumed by a newer checkpoint",
			cfg:  Config{Interval: time.Minute, MaxConcurrent: 2},
			script: []string{
				"attach delay=1m =>",
				"request r1 savepoint /sp @10s => trigger 1 s/0 savepoint",
				"tick @1m => trigger 2 s/0 checkpoint",
				"ackall 2 => persist 2",
				"persisted 2 => complete 2 x3",
				"pending => 1",
				"ackall 1 => export 1 /sp",
			},
		},
		{
			name: "manual trigger queued behind max concurrent, ignoring min pause",
			cfg:  Config{Interval: time.Minute, MinPause: 30 * time.Second},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"request r1 @1m1s =>",
				"request r2 @1m2s =>",
				"cancel r2 => true",
				"cancel r2 => false",
				"ackall 1 => persist 1",
				"persisted 1 @1m5s => complete 1 x3; trigger 2 s/0 checkpoint",
				"ackall 2 => persist 2",
				"persisted 2 @1m6s => discard 1; complete 2 x3; resolve r1 ok 2",
				"tick @1m30s =>",                       // periodic (fixed rate 1m+1m=2m) not due
				"tick @2m => trigger 3 s/0 checkpoint", // min pause since 1m6s has passed
			},
		},
		{
			name: "queued manual triggers run before a deferred periodic one",
			cfg:  Config{Interval: time.Minute, TolerableFailures: 5},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"tick @2m =>", // deferred
				"request r1 @2m1s =>",
				"decline 1 s/0 @2m2s => aborted 1 x3; discard 1; trigger 2 s/0 checkpoint",
				"ackall 2 => persist 2",
				"persisted 2 @2m3s => complete 2 x3; resolve r1 ok 2; trigger 3 s/0 checkpoint",
			},
		},
		{
			name: "detach aborts pending and queued, pauses the scheduler; ids keep growing",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"request r1 @1m1s =>",
				"detach @1m2s => aborted 1 x3; discard 1; resolve r1 detached",
				"next => none",
				"tick @5m =>",
				"request r2 => resolve r2 not-attached",
				"ack 1 m/0 => late discard 1",
				"attach delay=1m @10m =>",
				"tick @11m => trigger 2 s/0 checkpoint",
			},
		},
		{
			name: "restore continues ids and is the restore point",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"restore 41 =>",
				"latest => 41 checkpoint",
				"attach delay=1m =>",
				"restore 50 => attached",
				"ack 41 s/0 => unknown-id", // never discard the restore point
				"tick @1m => trigger 42 s/0 checkpoint",
				"ackall 42 => persist 42",
				"persisted 42 => discard 41; complete 42 x3",
			},
		},
		{
			name: "restore from a savepoint: kept, never discarded",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"restore 7 savepoint =>",
				"latest => 7 savepoint",
				"attach delay=1m =>",
				"tick @1m => trigger 8 s/0 checkpoint",
				"ackall 8 => persist 8",
				"persisted 8 => complete 8 x3",
				"latest => 8 checkpoint",
			},
		},
		{
			name: "stop with savepoint: nothing starts after it, it commits and is the restore point",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"ackall 1 => persist 1",
				"persisted 1 => complete 1 x3",
				"request r1 savepoint /sp terminal @1m10s => trigger 2 s/0 savepoint",
				"request r2 savepoint /sp terminal => resolve r2 stopping",
				"request r3 => ", // queued, not started
				"tick @5m => ",   // no periodic trigger either
				"ackall 2 => export 2 /sp",
				"persisted 2 path=/sp/sp-2 @5m1s => discard 1; complete 2 x3; resolve r1 ok 2", // subsumes 1; its staging files kept; tasks told
				"latest => 2 savepoint",
				"tick @10m => ",
			},
		},
		{
			name: "stop with savepoint that fails: checkpointing resumes",
			cfg:  Config{Interval: time.Minute, TolerableFailures: 5},
			script: []string{
				"attach delay=1m =>",
				"request r1 savepoint /sp terminal @10s => trigger 1 s/0 savepoint",
				"tick @1m => ",
				"decline 1 m/0 => aborted 1 x3; discard 1; resolve r1 declined",
				"tick @1m1s => trigger 2 s/0 checkpoint",
			},
		},
		{
			name: "an unclaimed checkpoint is never discarded",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"restore 7 unclaimed =>",
				"latest => 7 checkpoint",
				"attach delay=1m =>",
				"tick @1m => trigger 8 s/0 checkpoint",
				"ackall 8 => persist 8",
				"persisted 8 => complete 8 x3",
				"latest => 8 checkpoint",
				"shutdown finished => discard 8",
			},
		},
		{
			name: "trigger failure aborts without counting",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"attach sources=a/0,a/1 all=a/0,a/1,b/0 delay=1m =>",
				"tick @1m => trigger 1 a/0 checkpoint; trigger 1 a/1 checkpoint",
				"triggerfail 1 a/1 => aborted 1 x3; discard 1",
				"triggerfail 1 a/0 =>",
			},
		},
		{
			name: "a finalizing checkpoint is subsumed by a newer completed one",
			cfg:  Config{Interval: time.Minute, MaxConcurrent: 2, Timeout: 90 * time.Second},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"tick @2m => trigger 2 s/0 checkpoint",
				"ackall 1 => persist 1",
				"ackall 2 => persist 2",
				// 1 is finalizing, but 2 subsumes it (not counted)
				"persisted 2 => aborted 1 x3; discard 1; complete 2 x3",
				"persisted 1 fail => discard 1",
				"latest => 2 checkpoint",
			},
		},
		{
			name: "shutdown canceled deletes retained checkpoints",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"ackall 1 => persist 1",
				"persisted 1 => complete 1 x3",
				"tick @2m => trigger 2 s/0 checkpoint",
				"shutdown canceled => aborted 2 x3; discard 2; discard 1",
				"latest => none",
				"attach => closed",
				"request r1 => resolve r1 closed",
			},
		},
		{
			name: "shutdown canceled with RetainOnCancel keeps them",
			cfg:  Config{Interval: time.Minute, RetainOnCancel: true},
			script: []string{
				"attach delay=1m =>",
				"tick @1m => trigger 1 s/0 checkpoint",
				"ackall 1 => persist 1",
				"persisted 1 => complete 1 x3",
				"shutdown canceled =>",
				"latest => 1 checkpoint",
				"ack 1 s/0 => unknown-id",
			},
		},
		{
			name: "shutdown failed keeps, finished deletes even with RetainOnCancel",
			cfg:  Config{Interval: time.Minute, RetainOnCancel: true},
			script: []string{
				"restore 3 =>",
				"shutdown finished => discard 3",
			},
		},
		{
			name: "shutdown failed keeps checkpoints",
			cfg:  Config{Interval: time.Minute},
			script: []string{
				"restore 3 =>",
				"shutdown failed =>",
				"latest => 3 checkpoint",
			},
		},
		{
			name: "unaligned options travel with the barrier",
			cfg:  Config{Interval: time.Minute, Unaligned: true, AlignedTimeout: time.Second},
			script: []string{
				"attach delay=0s =>",
				"tick => trigger 1 s/0 checkpoint",
			},
		},
		{
			// The stall of a restarted job: the first periodic trigger came
			// due before the tasks ran, reached a source that was not
			// running and stayed pending until its timeout.
			name: "nothing is triggered before every task runs",
			cfg:  Config{Interval: time.Second},
			script: []string{
				"attach delay=0s running=none =>",
				"tick => ",
				"pending => 0",
				"running s/0 =>",
				"running m/0 =>",
				"tick @1s =>",
				"running k/0 @1500ms => trigger 1 s/0 checkpoint",
				"ackall 1 @1600ms => persist 1",
				"persisted 1 @1600ms => complete 1 x3",
				"tick @2s => trigger 2 s/0 checkpoint",
			},
		},
		{
			name: "manual requests and savepoints wait for running tasks",
			cfg:  Config{Interval: time.Hour},
			script: []string{
				"attach delay=1h running=none =>",
				"request r1 =>",
				"request r2 savepoint /sp =>",
				"running s/0 =>",
				"running m/0 =>",
				"running x/9 =>",
				"running k/0 => trigger 1 s/0 checkpoint; trigger 2 s/0 savepoint",
				"pending => 2",
			},
		},
		{
			name: "a task not ready declines: aborted, not counted, the next trigger proceeds",
			cfg:  Config{Interval: time.Second},
			script: []string{
				"attach delay=0s =>",
				"tick => trigger 1 s/0 checkpoint",
				"decline 1 s/0 reason=notready => aborted 1 x3; discard 1",
				"tick @1s => trigger 2 s/0 checkpoint",
				"decline 2 m/0 reason=canceled => aborted 2 x3; discard 2",
				"tick @2s => trigger 3 s/0 checkpoint",
				"decline 3 k/0 reason=finished => aborted 3 x3; discard 3",
				"tick @3s => trigger 4 s/0 checkpoint",
				"decline 4 k/0 reason=snapshot => aborted 4 x3; discard 4; failjob too-many-failures",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runScript(t, tc.cfg, tc.script) })
	}
}

func TestCoreFailuresOlderThanLastSuccessDoNotCount(t *testing.T) {
	c := newCore(Config{TolerableFailures: 0})
	c.succeeded(5)
	c.failed(3, &CheckpointError{ID: 3, Reason: ErrExpired})
	require.Empty(t, c.ready())
	c.failed(6, &CheckpointError{ID: 6, Reason: ErrExpired})
	require.Equal(t, "failjob too-many-failures", render(c.ready()))
}

func TestCoreFailureCountedOncePerID(t *testing.T) {
	c := newCore(Config{TolerableFailures: 1})
	c.failed(6, &CheckpointError{ID: 6, Reason: ErrExpired})
	c.failed(6, &CheckpointError{ID: 6, Reason: ErrFinalize})
	require.Empty(t, c.ready())
	require.Equal(t, 1, c.consecutive)
}

func TestCoreStatsHistoryBounded(t *testing.T) {
	lines := []string{"attach delay=1m =>"}
	for i := 1; i <= 5; i++ {
		lines = append(lines,
			fmt.Sprintf("tick @%dm => trigger %d s/0 checkpoint", i, i),
			fmt.Sprintf("ackall %d @%dm1s => persist %d", i, i, i))
		if i == 1 {
			lines = append(lines, fmt.Sprintf("persisted %d @%dm2s => complete %d x3", i, i, i))
		} else {
			lines = append(lines, fmt.Sprintf("persisted %d @%dm2s => discard %d; complete %d x3", i, i, i-1, i))
		}
	}
	lines = append(lines, "tick @6m => trigger 6 s/0 checkpoint", "ack 6 m/0 @6m3s =>")
	c := runScript(t, Config{Interval: time.Minute, HistorySize: 3}, lines)
	st := c.statsSnapshot(t0.Add(6*time.Minute + 10*time.Second))
	require.Equal(t, 5, st.Completed)
	require.Equal(t, 1, st.InProgress)
	require.Len(t, st.History, 3)
	require.Equal(t, barrier.CheckpointID(6), st.History[0].ID)
	require.Equal(t, InProgress, st.History[0].Status)
	require.Equal(t, 10*time.Second, st.History[0].Duration)
	require.Equal(t, 1, st.History[0].Acknowledged)
	require.Equal(t, 3, st.History[0].Tasks)
	require.Equal(t, 2*time.Second, st.History[1].Duration)
	require.Equal(t, int64(30), st.History[1].StateSize)
	require.Equal(t, time.Millisecond, st.History[1].PerTask[parseTask("k/0")].AlignmentDuration)
	require.Equal(t, barrier.CheckpointID(5), st.LatestCompleted.ID)
	require.Nil(t, st.LatestFailed)
	// copies: mutating the snapshot does not touch the tracker
	st.History[1].PerTask[parseTask("x/0")] = TaskStats{}
	require.Len(t, c.statsSnapshot(t0).History[1].PerTask, 3)
}

func TestNewAttemptValidation(t *testing.T) {
	gw := nopGateway{}
	for _, tc := range []struct{ sources, all string }{
		{"a/0", "b/0"},
		{"a/0,a/0", "a/0"},
		{"a/0", "a/0,a/0"},
	} {
		_, err := newAttempt(parseTasks(tc.sources), parseTasks(tc.all), gw)
		require.Error(t, err, "%+v", tc)
	}
	_, err := newAttempt(nil, parseTasks("a/0"), gw)
	require.Error(t, err)
	_, err = newAttempt(parseTasks("a/0"), nil, gw)
	require.Error(t, err)
	_, err = newAttempt(parseTasks("a/0"), parseTasks("a/0"), nil)
	require.Error(t, err)
}
