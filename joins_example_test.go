package weir_test

import (
	"context"
	"fmt"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// Order is an order placed at TS (unix ms).
type Order struct {
	ID     string
	TS     int64
	Amount int64
}

// Payment pays an order at TS.
type Payment struct {
	Order string
	TS    int64
}

var orderCodec = codec.Struct3(codec.String(), func(o Order) string { return o.ID },
	codec.Int64(), func(o Order) int64 { return o.TS },
	codec.Int64(), func(o Order) int64 { return o.Amount },
	func(id string, ts, amount int64) Order { return Order{id, ts, amount} })

var paymentCodec = codec.Struct2(codec.String(), func(p Payment) string { return p.Order },
	codec.Int64(), func(p Payment) int64 { return p.TS },
	func(order string, ts int64) Payment { return Payment{order, ts} })

// Orders joined with their payments within 10 minutes, by event time (an
// interval join): an order paid later than that, or never, has no pair.
func ExampleIntervalJoin() {
	env := weir.NewEnvironment()
	m := int64(time.Minute / time.Millisecond)
	orders := weir.FromSlice(env, []Order{{"o1", 0, 30}, {"o2", 1 * m, 12}, {"o3", 2 * m, 99}, {"o4", 3 * m, 5}}).WithCodec(orderCodec)
	payments := weir.FromSlice(env, []Payment{{"o2", 4 * m}, {"o1", 9 * m}, {"o3", 15 * m}}).WithCodec(paymentCodec)

	byOrder := weir.KeyBy(weir.AssignTimestamps(orders, weir.MonotonousTimestamps(func(o Order) int64 { return o.TS })),
		func(o Order) string { return o.ID }, codec.String())
	byPaid := weir.KeyBy(weir.AssignTimestamps(payments, weir.MonotonousTimestamps(func(p Payment) int64 { return p.TS })),
		func(p Payment) string { return p.Order }, codec.String())
	paid := weir.IntervalJoin[string](byOrder, byPaid).Between(0, 10*time.Minute).
		Process(func(o Order, p Payment) string {
			return fmt.Sprintf("%s: %d paid after %v", o.ID, o.Amount, time.Duration(p.TS-o.TS)*time.Millisecond)
		})

	weir.SinkFunc(paid, func(s string) error { fmt.Println(s); return nil })
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// o1: 30 paid after 9m0s
	// o2: 12 paid after 3m0s
}

// Clicks per user and minute beside the user's page views of the same
// minute (a window join over tumbling windows): each pair of a window
// once it closes.
func ExampleJoin() {
	env := weir.NewEnvironment()
	s := int64(time.Second / time.Millisecond)
	clicks := weir.FromSlice(env, []Click{{"ann", 10 * s}, {"bob", 20 * s}, {"ann", 70 * s}}).WithCodec(clickCodec)
	views := weir.FromSlice(env, []Click{{"ann", 5 * s}, {"ann", 50 * s}, {"bob", 65 * s}}).WithCodec(clickCodec)
	ts := weir.MonotonousTimestamps(func(c Click) int64 { return c.TS })

	pairs := weir.Join[string, string](weir.AssignTimestamps(clicks, ts), weir.AssignTimestamps(views, ts)).
		Where(func(c Click) string { return c.User }).EqualTo(func(v Click) string { return v.User }).
		Window(weir.TumblingWindows(time.Minute)).
		Apply(func(c, v Click) string { return fmt.Sprintf("%s: click at %ds, view at %ds", c.User, c.TS/s, v.TS/s) })

	weir.SinkFunc(pairs, func(p string) error { fmt.Println(p); return nil })
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// ann: click at 10s, view at 5s
	// ann: click at 10s, view at 50s
}
