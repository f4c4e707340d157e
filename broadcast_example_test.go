package weir_test

import (
	"context"
	"fmt"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

type reading struct {
	Sensor string
	V      int64
}

// limitState is the broadcast state of ExampleKeyedBroadcastProcess.
var limitState = weir.MapStateDescriptor[string, int64]{Name: "limit"}

// alerter flags the readings above the limit. The limit is broadcast
// state: every subtask gets it; readings that come before it wait in
// keyed state, and the limit's arrival checks them all (ApplyToKeyedState),
// so the alerts do not depend on which stream comes first.
type alerter struct {
	limit   *weir.BroadcastMap[string, int64]
	pending *state.ListState[int64]
}

func (a *alerter) Open(rc *weir.RuntimeContext) (err error) {
	if a.limit, err = weir.GetBroadcastState(rc, limitState); err != nil {
		return err
	}
	a.pending, err = weir.ListState(rc, "pending", codec.Int64())
	return err
}

func (a *alerter) ProcessElement(sensor string, r reading, out *weir.Collector[string]) error {
	if limit, ok := a.limit.Get("max"); ok {
		alert(sensor, r.V, limit, out)
		return nil
	}
	return a.pending.Add(r.V)
}

func (a *alerter) ProcessBroadcastElement(limit int64, ctx *weir.BroadcastContext[string], out *weir.Collector[string]) error {
	if err := a.limit.Put("max", limit); err != nil {
		return err
	}
	return ctx.ApplyToKeyedState("pending", func(sensor string) error {
		vs, err := a.pending.Get()
		for _, v := range vs {
			alert(sensor, v, limit, out)
		}
		if err != nil {
			return err
		}
		return a.pending.Clear()
	})
}

func alert(sensor string, v, limit int64, out *weir.Collector[string]) {
	if v > limit {
		out.Emit(fmt.Sprintf("%s: %d > %d", sensor, v, limit))
	}
}

// A broadcast-state job: a limit broadcast to every subtask of a keyed
// operator flags the sensor readings above it.
func ExampleKeyedBroadcastProcess() {
	env := weir.NewEnvironment(weir.WithParallelism(2))
	readings := weir.FromSlice(env, []reading{{"a", 3}, {"b", 9}, {"a", 12}, {"c", 15}}).WithCodec(codec.JSON[reading]())
	limits := weir.Broadcast(weir.FromSlice(env, []int64{10}), limitState)
	perSensor := weir.KeyBy(readings, func(r reading) string { return r.Sensor }, codec.String())
	alerts := weir.KeyedBroadcastProcess(perSensor, limits,
		func() weir.KeyedBroadcastProcessFunction[string, reading, int64, string] { return &alerter{} })
	weir.SinkFunc(alerts, func(a string) error { fmt.Println(a); return nil })
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// a: 12 > 10
	// c: 15 > 10
}
