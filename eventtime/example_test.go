package eventtime_test

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/clock"
)

// A task with two inputs combines their watermarks: the minimum goes out
// once both have one, and an idle input stops holding it back.
func ExampleValve() {
	v, err := eventtime.NewValve(2)
	if err != nil {
		panic(err)
	}
	forward := func(wm int64, ok bool) {
		if ok {
			fmt.Println("forward watermark", wm)
		}
	}
	forward(v.InputWatermark(0, 10)) // channel 1 has none yet: nothing
	forward(v.InputWatermark(1, 5))
	e := v.InputStatus(1, eventtime.Idle)
	forward(e.Watermark, e.HasWatermark)
	e = v.InputStatus(0, eventtime.Idle)
	forward(e.Watermark, e.HasWatermark)
	if e.StatusChanged {
		fmt.Println("forward status", e.Status)
	}
	fmt.Println("channel 1:", v.Channel(1).Watermark, v.Channel(1).Status)
	// Output:
	// forward watermark 5
	// forward watermark 10
	// forward status idle
	// channel 1: 5 idle
}

// printOutput is an Output that prints what reaches it.
type printOutput struct{}

func (printOutput) EmitWatermark(wm int64) { fmt.Println("watermark", wm) }
func (printOutput) MarkIdle()              { fmt.Println("idle") }
func (printOutput) MarkActive()            { fmt.Println("active") }

// A source's watermarks trail its highest timestamp by the out-of-orderness
// bound, and its output turns idle when records stop coming.
func ExampleIdleness() {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	bounded, err := eventtime.NewBoundedOutOfOrderness(2 * time.Second)
	if err != nil {
		panic(err)
	}
	gen, err := eventtime.NewIdleness(bounded, time.Minute, clk.Now)
	if err != nil {
		panic(err)
	}
	out := eventtime.NewDedupOutput(printOutput{})

	gen.OnPeriodicEmit(out) // no record yet: nothing
	gen.OnEvent(10_000, out)
	gen.OnEvent(12_000, out)
	gen.OnEvent(11_000, out) // late, but within the bound
	gen.OnPeriodicEmit(out)

	// No record for more than a minute: idle.
	clk.Advance(time.Second)
	gen.OnPeriodicEmit(out) // the quiet period starts
	clk.Advance(61 * time.Second)
	gen.OnPeriodicEmit(out)

	gen.OnEvent(20_000, out) // active again
	gen.OnPeriodicEmit(out)
	// Output:
	// watermark 9999
	// idle
	// active
	// watermark 17999
}
