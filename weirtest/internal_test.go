package weirtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

func numbersJob(r *R) {
	env := r.Env(weir.WithParallelism(2))
	src := weir.FromGenerator(env, 1000, func(i int64) int64 { return i }).WithCodec(codec.Int64())
	Collect(r, weir.Map(src, func(v int64) int64 { return v + 1 }).WithCodec(codec.Int64()), nil)
}

func testConfig() *Config {
	cfg := &Config{}
	cfg.defaults()
	cfg.RunTimeout = time.Minute
	return cfg
}

// A fault aimed at an operator the job does not have never fires: the run
// is a harness problem, not a pass.
func TestFaultThatNeverFiredIsAHarnessError(t *testing.T) {
	plan := []Fault{{Kind: TaskFailure, Operator: "no-such-operator", At: 1}}
	res, err := runOnce(t.Context(), testConfig(), 7, plan, nil, numbersJob)
	if err != nil {
		t.Fatal(err)
	}
	var he *HarnessError
	if !errors.As(res.harnessErr, &he) {
		t.Fatalf("want a harness error, got %v", res.harnessErr)
	}
	t.Log(he)
}

// A read fault of a run that never restores is not a harness problem.
func TestConditionalFaultMayNotFire(t *testing.T) {
	plan := []Fault{{Kind: ReadError, At: 1}}
	res, err := runOnce(t.Context(), testConfig(), 7, plan, nil, numbersJob)
	if err != nil || res.harnessErr != nil {
		t.Fatal(err, res.harnessErr)
	}
}

// The same seed draws the same faults at the same counts.
func TestPlanIsAFunctionOfTheSeed(t *testing.T) {
	p := profile{subtasks: []subtaskProfile{
		{Operator: "b", Kind: sinkOp, Subtask: 1, Records: 50},
		{Operator: "a", Kind: sourceOp, Subtask: 0, Records: 100},
		{Operator: "b", Kind: sinkOp, Subtask: 0, Records: 50},
	}, tcpBytes: 1 << 20}
	rev := profile{subtasks: []subtaskProfile{p.subtasks[2], p.subtasks[1], p.subtasks[0]}, tcpBytes: 1<<20 + 5000}
	for seed := uint64(1); seed < 200; seed++ {
		a, b := planFaults(seed, AllKinds, 1, 3, true, p), planFaults(seed, AllKinds, 1, 3, true, rev)
		if len(a) == 0 || len(a) != len(b) {
			t.Fatalf("seed %d: %v vs %v", seed, a, b)
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("seed %d: %v vs %v", seed, a[i], b[i])
			}
		}
	}
}

func TestVerdict(t *testing.T) {
	rs := func(kv ...string) []Record {
		var out []Record
		for i := 0; i < len(kv); i += 2 {
			out = append(out, Record{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	want := rs("a", "1", "a", "2", "b", "3", "b", "4")
	for _, tc := range []struct {
		name                         string
		got                          []Record
		atLeastOnce                  bool
		lost, dup, unexpected, order int
		ok                           bool
	}{
		{"same", rs("b", "3", "a", "1", "b", "4", "a", "2"), false, 0, 0, 0, 0, true},
		{"lost", rs("a", "1", "a", "2", "b", "3"), false, 1, 0, 0, 0, false},
		{"dup", rs("a", "1", "a", "2", "a", "2", "b", "3", "b", "4"), false, 0, 1, 0, 0, false},
		{"wrong", rs("a", "1", "a", "2", "b", "3", "b", "5"), false, 1, 0, 1, 0, false},
		{"order", rs("a", "2", "a", "1", "b", "3", "b", "4"), false, 0, 0, 0, 1, false},
		{"at-least-once dup", rs("a", "1", "a", "2", "a", "2", "b", "3", "b", "4"), true, 0, 1, 0, 0, true},
		{"at-least-once lost", rs("a", "1", "b", "3", "b", "4"), true, 1, 0, 0, 0, false},
	} {
		v := compare(tc.atLeastOnce, []string{"out"}, expect([][]Record{want}), [][]Record{tc.got})
		if v.Lost != tc.lost || v.Duplicated != tc.dup || v.Unexpected != tc.unexpected || v.OutOfOrder != tc.order || v.OK() != tc.ok {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}

// A run that hangs ends at the run timeout with an error naming it.
func TestRunTimeout(t *testing.T) {
	cfg := testConfig()
	cfg.RunTimeout = 200 * time.Millisecond
	_, err := runOnce(t.Context(), cfg, 1, nil, nil, func(r *R) {
		env := r.Env()
		src := weir.FromGenerator(env, -1, func(i int64) int64 { return i }).WithCodec(codec.Int64())
		weir.Discard(src)
	})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
}
