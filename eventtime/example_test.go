package eventtime_test

import (
	"fmt"

	"github.com/weirstream/weir/eventtime"
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
