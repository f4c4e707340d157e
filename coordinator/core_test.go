package coordinator

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
)

// TestCoreTranscripts drives the pure core (core.go) from the text
// transcripts in testdata/core/*.txt (github.com/cockroachdb/datadriven;
// testdata/core/README.md describes the format with an example). Each
// directive is one input to the core; its expected output is what came out
// of it, one effect per line, in the order the caller must carry them out.
//
// Config: "new" starts a fresh core, with a fresh clock at t0; its
// arguments are the Config fields, unset ones keep their zero value (so
// the documented defaults apply):
//
//	new [interval=D] [min-pause=D] [timeout=D] [max-concurrent=N]
//	    [tolerable=N] [retained=N] [retain-on-cancel] [unaligned]
//	    [aligned-timeout=D] [history=N] [mode=exactly-once|at-least-once]
//
// It prints nothing, or the error of Config.Validate.
//
// Time: every command may carry "@D", the instant t0+D it happens at. Time
// only moves forward: a command without @D happens at the time of the one
// before it, and an @D earlier than that is an error in the transcript.
//
// Commands (TASK is vertex/subtask, e.g. s/0; REQ is r<n>; ID a checkpoint ID):
//
//	attach [sources=TASK,..] [all=TASK,..] [delay=D] [running=none]
//	       [upstream=TASK:UP:UP..,..] [operators=VERTEX:OP:OP..,..]
//	    default: sources s/0 of all s/0,m/0,k/0, first periodic trigger
//	    after delay 0, and every task reported running at once
//	    (running=none: none is; report them with "running"); upstream
//	    gives tasks their upstream tasks (unknown by default); operators
//	    the operator IDs of vertices (WithOperators)
//	running TASK
//	finished TASK            the task finished (FLIP-147)
//	finishing TASK           the task waits for its final checkpoint
//	tick
//	detach [finished]        the attempt failed ("task failed"), or
//	                         finished (every task ended, no failure)
//	shutdown finished|canceled|failed|suspended
//	ack ID TASK              acknowledge with a snapshot of 10 bytes
//	ackall ID                ack from every task that has not yet
//	                         (snapshots of 10 bytes, alignment 1ms)
//	decline ID TASK [reason=snapshot|notready|finished|canceled]
//	                         (no reason: an untyped error, which counts)
//	triggerfail ID TASK      the trigger of a source could not be delivered
//	persisted ID [fail] [path=P]
//	request REQ [savepoint DIR [terminal]]
//	cancel REQ               prints true or false
//	restore ID [savepoint] [unclaimed]
//	latest                   prints "ID kind" of the newest restore point, or none
//	pending                  prints the number of pending checkpoints
//	next                     prints when tick is next due (as D), or none
//	stats                    prints the statistics snapshot (see renderStats)
//
// Output, one line per effect (notifications of every task of a checkpoint
// collapse into one line with a count):
//
//	trigger ID TASK KIND [unaligned|aligned-timeout=D]
//	complete ID xN | aborted ID xN
//	persist ID | export ID DIR   (then finished=TASK,.. if any, each
//	                             TASK[OP OP..] with the operators it records)
//	discard ID
//	resolve REQ ok ID | resolve REQ REASON
//	failjob REASON
//
// REASON names the sentinel the error wraps (reasonNames). A command that
// returns something other than effects prints that first: an ack that was
// not accepted its outcome (duplicate, unknown-task, late, unknown-id), a
// refused attach or restore its reason.
func TestCoreTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/core", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a transcript", path)
		}
		var tr *transcript
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				cfg := parseConfig(t, d)
				if err := cfg.Validate(); err != nil {
					return err.Error()
				}
				tr = &transcript{c: newCore(cfg), now: t0}
				return ""
			}
			if tr == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			return tr.step(t, d)
		})
	})
}

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
	{ErrTriggerFailed, "trigger-failed"}, {ErrSubsumed, "subsumed"}, {ErrDetached, "detached"}, {ErrJobFinished, "job-finished"},
	{ErrClosed, "closed"}, {ErrNotAttached, "not-attached"}, {ErrAttached, "attached"}, {ErrStopping, "stopping"},
	{ErrAllFinished, "all-finished"},
}

func reasonName(err error) string {
	for _, r := range reasonNames {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return err.Error()
}

// render prints effects one per line; notifications to every task of one
// checkpoint collapse into one line with a count.
func render(effs []effect) string {
	var out []string
	for i := 0; i < len(effs); i++ {
		switch e := effs[i].(type) {
		case triggerTask:
			line := fmt.Sprintf("trigger %d %s/%d %v", e.barrier.ID, e.task.Vertex, e.task.Subtask, e.barrier.Options.Kind)
			switch o := e.barrier.Options; o.Alignment {
			case barrier.Unaligned:
				line += " unaligned"
			case barrier.AlignedWithTimeout:
				line += fmt.Sprintf(" aligned-timeout=%v", o.AlignmentTimeout)
			}
			out = append(out, line)
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
			line := fmt.Sprintf("persist %d", e.meta.ID)
			if e.meta.Kind == barrier.Savepoint {
				line = fmt.Sprintf("export %d %s", e.meta.ID, e.dir)
			}
			var fin []string
			for k, ts := range e.meta.Tasks {
				if ts.Finished {
					f := fmt.Sprintf("%s/%d", k.Vertex, k.Subtask)
					if len(ts.Operators) > 0 {
						var ops []string
						for id, op := range ts.Operators {
							if !op.Finished || op.Keyed != nil || op.Operator != nil {
								panic(fmt.Sprintf("finished task %s: operator %s with state or unfinished: %+v", f, id, op))
							}
							ops = append(ops, id)
						}
						slices.Sort(ops)
						f += "[" + strings.Join(ops, " ") + "]"
					}
					fin = append(fin, f)
				}
			}
			if len(fin) > 0 {
				slices.Sort(fin)
				line += " finished=" + strings.Join(fin, ",")
			}
			out = append(out, line)
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
		default:
			panic(fmt.Sprintf("render: unknown effect %T", e))
		}
	}
	return strings.Join(out, "\n")
}

func parseConfig(t *testing.T, d *datadriven.TestData) Config {
	var cfg Config
	for _, a := range d.CmdArgs {
		val := func() string {
			if len(a.Vals) != 1 {
				d.Fatalf(t, "new: %s wants one value", a.Key)
			}
			return a.Vals[0]
		}
		dur := func() time.Duration {
			v, err := time.ParseDuration(val())
			if err != nil {
				d.Fatalf(t, "new: %s: %v", a.Key, err)
			}
			return v
		}
		num := func() int {
			v, err := strconv.Atoi(val())
			if err != nil {
				d.Fatalf(t, "new: %s: %v", a.Key, err)
			}
			return v
		}
		switch a.Key {
		case "interval":
			cfg.Interval = dur()
		case "min-pause":
			cfg.MinPause = dur()
		case "timeout":
			cfg.Timeout = dur()
		case "max-concurrent":
			cfg.MaxConcurrent = num()
		case "tolerable":
			cfg.TolerableFailures = num()
		case "retained":
			cfg.Retained = num()
		case "retain-on-cancel":
			cfg.RetainOnCancel = true
		case "unaligned":
			cfg.Unaligned = true
		case "aligned-timeout":
			cfg.AlignedTimeout = dur()
		case "history":
			cfg.HistorySize = num()
		case "mode":
			switch v := val(); v {
			case "exactly-once":
				cfg.Mode = barrier.ExactlyOnce
			case "at-least-once":
				cfg.Mode = barrier.AtLeastOnce
			default:
				d.Fatalf(t, "new: unknown mode %q", v)
			}
		default:
			d.Fatalf(t, "new: unknown argument %q", a.Key)
		}
	}
	return cfg
}

// transcript is the state of one transcript between two "new" directives.
type transcript struct {
	c   *core
	now time.Time
}

func (tr *transcript) step(t *testing.T, d *datadriven.TestData) string {
	args := []string{d.Cmd}
	kv := map[string]string{}
	for _, a := range d.CmdArgs {
		switch {
		case strings.HasPrefix(a.Key, "@"):
			off, err := time.ParseDuration(a.Key[1:])
			if err != nil {
				d.Fatalf(t, "%s: %v", a.Key, err)
			}
			at := t0.Add(off)
			if at.Before(tr.now) {
				d.Fatalf(t, "%s is before the current time @%v", a.Key, tr.now.Sub(t0))
			}
			tr.now = at
		case len(a.Vals) > 0:
			kv[a.Key] = strings.Join(a.Vals, ",")
		default:
			args = append(args, a.Key)
		}
	}
	argc := func(n int) {
		if len(args) < n+1 {
			d.Fatalf(t, "%s wants %d arguments", d.Cmd, n)
		}
	}
	id := func(i int) barrier.CheckpointID {
		argc(i)
		n, err := strconv.ParseUint(args[i], 10, 64)
		if err != nil {
			d.Fatalf(t, "checkpoint ID %q: %v", args[i], err)
		}
		return barrier.CheckpointID(n)
	}
	task := func(i int) state.TaskKey {
		argc(i)
		return parseTask(args[i])
	}
	req := func(i int) requestID {
		argc(i)
		n, err := strconv.Atoi(strings.TrimPrefix(args[i], "r"))
		if err != nil || !strings.HasPrefix(args[i], "r") {
			d.Fatalf(t, "request %q: want r<n>", args[i])
		}
		return requestID(n)
	}
	has := func(word string) bool { return slices.Contains(args[1:], word) }
	c, now := tr.c, tr.now
	var result string // printed before the effects
	switch d.Cmd {
	case "attach":
		srcs, all := "s/0", "s/0,m/0,k/0"
		if v, ok := kv["sources"]; ok {
			srcs = v
		}
		if v, ok := kv["all"]; ok {
			all = v
		}
		a, err := newAttempt(parseTasks(srcs), parseTasks(all), nopGateway{})
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		if v, ok := kv["upstream"]; ok {
			a.upstream = map[state.TaskKey][]state.TaskKey{}
			for _, e := range strings.Split(v, ",") {
				ks := strings.Split(e, ":")
				a.upstream[parseTask(ks[0])] = parseTasks(strings.Join(ks[1:], ","))
			}
		}
		if v, ok := kv["operators"]; ok {
			a.operators = map[string][]Operator{}
			for _, e := range strings.Split(v, ",") {
				ks := strings.Split(e, ":")
				for _, id := range ks[1:] {
					a.operators[ks[0]] = append(a.operators[ks[0]], Operator{ID: id})
				}
			}
		}
		var delay time.Duration
		if v, ok := kv["delay"]; ok {
			if delay, err = time.ParseDuration(v); err != nil {
				d.Fatalf(t, "delay: %v", err)
			}
		}
		if err := c.attach(a, now, delay); err != nil {
			result = reasonName(err)
			break
		}
		if kv["running"] != "none" {
			for _, task := range a.all {
				c.taskRunning(task, now)
			}
		}
	case "running":
		c.taskRunning(task(1), now)
	case "finished":
		c.taskFinished(task(1), now)
	case "finishing":
		c.taskFinishing(task(1), now)
	case "tick":
		c.tick(now)
	case "detach":
		if len(args) > 1 && args[1] == "finished" {
			c.detach(nil, now)
			break
		}
		c.detach(errors.New("task failed"), now)
	case "shutdown":
		argc(1)
		st, ok := map[string]JobStatus{"finished": JobFinished, "canceled": JobCanceled, "failed": JobFailed, "suspended": JobSuspended}[args[1]]
		if !ok {
			d.Fatalf(t, "unknown job status %q", args[1])
		}
		c.shutdown(st, now)
	case "ack":
		o := c.ack(task(2), id(1), snap(10), TaskCheckpointMetrics{}, now)
		if o != ackAccepted && o != ackLast {
			result = o.String()
		}
	case "ackall":
		p := c.pending[id(1)]
		if p == nil {
			d.Fatalf(t, "checkpoint %d not pending", id(1))
		}
		for _, task := range p.tasks() {
			if _, done := p.acks[task]; !done {
				c.ack(task, id(1), snap(10), TaskCheckpointMetrics{AlignmentDuration: time.Millisecond}, now)
			}
		}
	case "decline":
		var reason error = errors.New("no")
		if v, ok := kv["reason"]; ok {
			r, ok := map[string]barrier.DeclineReason{"snapshot": barrier.DeclineSnapshotFailed, "notready": barrier.DeclineTaskNotReady,
				"finished": barrier.DeclineTaskFinished, "canceled": barrier.DeclineTaskCanceled}[v]
			if !ok {
				d.Fatalf(t, "unknown decline reason %q", v)
			}
			reason = barrier.Decline(r, nil)
		}
		c.decline(task(2), id(1), reason, now)
	case "triggerfail":
		c.triggerFailed(task(2), id(1), errors.New("gone"), now)
	case "persisted":
		var err error
		if has("fail") {
			err = errors.New("disk full")
		}
		c.persisted(id(1), kv["path"], err, now)
	case "request":
		r := request{id: req(1), kind: barrier.Checkpoint}
		if len(args) > 2 && args[2] == "savepoint" {
			argc(3)
			r.kind, r.dir = barrier.Savepoint, args[3]
			r.terminal = len(args) > 4 && args[4] == "terminal"
		}
		c.request(r, now)
	case "cancel":
		result = strconv.FormatBool(c.cancelRequest(req(1)))
	case "restore":
		m := state.Metadata{ID: id(1), Kind: barrier.Checkpoint}
		if has("savepoint") {
			m.Kind = barrier.Savepoint
		}
		if err := c.restore(m, !has("unclaimed")); err != nil {
			result = reasonName(err)
		}
	case "latest":
		result = "none"
		if m, ok := c.latest(); ok {
			result = fmt.Sprintf("%d %v", m.ID, m.Kind)
		}
	case "pending":
		result = strconv.Itoa(len(c.pending))
	case "next":
		result = "none"
		if next, ok := c.nextDeadline(); ok {
			result = next.Sub(t0).String()
		}
	case "stats":
		result = renderStats(c.statsSnapshot(now))
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	effs := render(c.ready())
	switch {
	case result == "":
		return effs
	case effs == "":
		return result
	}
	return result + "\n" + effs
}

// renderStats prints a statistics snapshot: the counters, then the history
// newest first, each checkpoint followed by its acknowledgements by task.
//
//	in-progress=N completed=N failed=N latest-completed=ID|none latest-failed=ID|none
//	ID KIND STATUS duration=D acked=N/N size=BYTES [path=P] [failure=REASON]
//	  TASK ack=@D align=D size=BYTES
func renderStats(st Stats) string {
	latest := func(cs *CheckpointStats) string {
		if cs == nil {
			return "none"
		}
		return strconv.FormatUint(uint64(cs.ID), 10)
	}
	out := []string{fmt.Sprintf("in-progress=%d completed=%d failed=%d latest-completed=%s latest-failed=%s",
		st.InProgress, st.Completed, st.Failed, latest(st.LatestCompleted), latest(st.LatestFailed))}
	if st.Aborted > 0 {
		out[0] += fmt.Sprintf(" aborted=%d", st.Aborted)
	}
	for _, cs := range st.History {
		line := fmt.Sprintf("%d %v %s duration=%v acked=%d/%d size=%d", cs.ID, cs.Kind,
			strings.ReplaceAll(cs.Status.String(), " ", "-"), cs.Duration, cs.Acknowledged, cs.Tasks, cs.StateSize)
		if cs.SavepointPath != "" {
			line += " path=" + cs.SavepointPath
		}
		if cs.Failure != nil {
			line += " failure=" + reasonName(cs.Failure)
		}
		out = append(out, line)
		tasks := slices.SortedFunc(maps.Keys(cs.PerTask), func(a, b state.TaskKey) int {
			return cmp.Or(cmp.Compare(a.Vertex, b.Vertex), cmp.Compare(a.Subtask, b.Subtask))
		})
		for _, task := range tasks {
			ts := cs.PerTask[task]
			out = append(out, fmt.Sprintf("  %s/%d ack=@%v align=%v size=%d", task.Vertex, task.Subtask,
				ts.AckTime.Sub(t0), ts.AlignmentDuration, ts.StateSize))
		}
	}
	return strings.Join(out, "\n")
}

func snap(size int64) state.TaskSnapshot {
	return state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
		"op": {Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: "f", Size: size}}},
	}}
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

// TestCoreStatsSnapshotIsACopy: testdata/core/stats.txt shows what the
// snapshot holds; this shows that changing it does not touch the tracker.
func TestCoreStatsSnapshotIsACopy(t *testing.T) {
	c := newCore(Config{Interval: time.Minute})
	a, err := newAttempt(parseTasks("s/0"), parseTasks("s/0,k/0"), nopGateway{})
	require.NoError(t, err)
	require.NoError(t, c.attach(a, t0, 0))
	for _, task := range a.all {
		c.taskRunning(task, t0)
	}
	c.tick(t0)
	require.Equal(t, "trigger 1 s/0 checkpoint", render(c.ready()))
	c.ack(parseTask("s/0"), 1, snap(10), TaskCheckpointMetrics{}, t0)

	st := c.statsSnapshot(t0)
	st.History[0].PerTask[parseTask("x/0")] = TaskStats{}
	st.History[0].Acknowledged = 7
	again := c.statsSnapshot(t0)
	require.Len(t, again.History[0].PerTask, 1)
	require.Equal(t, 1, again.History[0].Acknowledged)
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
