package multiinput_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// Keyed connect of streams whose keys are encoded by different codecs:
// equal keys would not meet, so Execute fails, naming the operator.
func TestConnectKeyedWithDifferentKeyCodecsFails(t *testing.T) {
	env := weir.NewEnvironment(weir.WithParallelism(2))
	a := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
	b := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
	c := weir.ConnectKeyed(weir.KeyBy(a, func(v int64) int64 { return v }, codec.Int64()),
		weir.KeyBy(b, func(v int64) int64 { return v }, codec.JSON[int64]()))
	weir.Discard(weir.KeyedCoProcess(c, func() weir.KeyedCoProcessFunction[int64, int64, int64, int64] { return nil }).Name("matcher"))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "operator matcher")
	require.ErrorContains(t, err, "keys are encoded differently")
}

// A union is not an operator: naming it is an error of the job.
func TestUnionIsNoOperator(t *testing.T) {
	env := weir.NewEnvironment()
	a := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
	weir.Discard(weir.Union(a, a).Name("u"))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "Name of a union")
}

// SideOutput of a stream no process function produced is an error of the
// job.
func TestSideOutputOfAMapFails(t *testing.T) {
	env := weir.NewEnvironment()
	m := weir.Map(weir.FromGenerator(env, 10, func(i int64) int64 { return i }), func(v int64) int64 { return v })
	weir.Discard(weir.SideOutput(m, weir.NewOutputTag[int64]("late")))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "not the output of a process function")
}

// A broadcast process function asking for a broadcast state its broadcast
// stream does not declare fails its task, and the job (no restarts) with
// it.
func TestUndeclaredBroadcastStateFailsTheTask(t *testing.T) {
	env := weir.NewEnvironment(weir.WithParallelism(1))
	s := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
	rules := weir.Broadcast(weir.FromGenerator(env, 1, func(i int64) string { return "r" }))
	weir.Discard(weir.BroadcastProcess(s, rules, func() weir.BroadcastProcessFunction[int64, string, int64] {
		return &undeclared{}
	}))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, `broadcast state "other": not a state of the broadcast stream`)
}

type undeclared struct{}

func (undeclared) Open(rc *weir.RuntimeContext) error {
	_, err := weir.GetBroadcastState(rc, weir.MapStateDescriptor[string, int64]{Name: "other"})
	return err
}
func (undeclared) ProcessElement(int64, *weir.Collector[int64]) error           { return nil }
func (undeclared) ProcessBroadcastElement(string, *weir.Collector[int64]) error { return nil }
