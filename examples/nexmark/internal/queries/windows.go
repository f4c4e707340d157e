package queries

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
)

// count is the aggregate function of a window's number of values.
func count[T any]() weir.AggregateFunction[T, int64, int64] {
	return weir.AggregateFunction[T, int64, int64]{
		Codec:  codec.Int64(),
		New:    func() int64 { return 0 },
		Add:    func(n int64, _ T) int64 { return n + 1 },
		Merge:  func(a, b int64) int64 { return a + b },
		Result: func(n int64) int64 { return n },
	}
}

// Q5Row is a row of q5: an auction with the most bids of a window, and
// their number.
type Q5Row struct {
	Auction   int64 `json:"auction"`
	Num       int64 `json:"num"`
	StartTime int64 `json:"starttime"`
	EndTime   int64 `json:"endtime"`
}

var q5RowCodec = codec.Struct4(codec.Int64(), func(r Q5Row) int64 { return r.Auction },
	codec.Int64(), func(r Q5Row) int64 { return r.Num },
	codec.Int64(), func(r Q5Row) int64 { return r.StartTime },
	codec.Int64(), func(r Q5Row) int64 { return r.EndTime },
	func(a, n, s, e int64) Q5Row { return Q5Row{a, n, s, e} })

// Q5 is Nexmark's q5, hot items: in every sliding window of 10 s every
// 2 s, the auctions with the most bids (all of them on a tie). Bids are
// counted per auction and window, then each window's counts meet in the
// window's key and the largest are kept.
func Q5(events *weir.Stream[nexmark.Event]) *weir.Stream[Q5Row] {
	bids := weir.FlatMap(events, func(e nexmark.Event, emit func(int64)) {
		if b := e.Bid; b != nil {
			emit(b.Auction)
		}
	}).WithCodec(codec.Int64()).Name("q5 bids")
	perAuction := weir.KeyBy(bids, func(a int64) int64 { return a }, codec.Int64())
	counts := weir.WindowAggregate(weir.Window(perAuction, weir.SlidingWindows(10*time.Second, 2*time.Second)),
		count[int64](), codec.Int64()).Name("q5 counts").UID("q5 counts")
	// A window's counts all have its last timestamp, so they meet in the
	// tumbling 2-s window that ends with it, which keeps only the largest
	// (incrementally: a window's counts are as many as its auctions).
	perWindow := weir.KeyBy(counts, func(c weir.Windowed[int64, int64]) int64 { return c.Window.End }, codec.Int64())
	hottest := weir.WindowAggregate(weir.Window(perWindow, weir.TumblingWindows(2*time.Second)),
		topAggregate(q5TopCodec, func(c weir.Windowed[int64, int64]) top[int64] { return top[int64]{c.Value, []int64{c.Key}} }),
		q5TopCodec).Name("q5 hottest").UID("q5 hottest")
	return weir.FlatMap(hottest, func(w weir.Windowed[int64, top[int64]], emit func(Q5Row)) {
		// The sliding window ends where the tumbling one does.
		for _, a := range w.Value.Items {
			emit(Q5Row{a, w.Value.Key, w.Window.End - 10_000, w.Window.End})
		}
	}).WithCodec(q5RowCodec).Name("q5")
}

// top is the largest key of some values of a window (a count of bids, a
// price), and the values with it: all of them on a tie.
type top[T any] struct {
	Key   int64
	Items []T
}

func topCodec[T any](c codec.Codec[T]) codec.Codec[top[T]] {
	return codec.Struct2(codec.Int64(), func(t top[T]) int64 { return t.Key },
		codec.Slice[T](c), func(t top[T]) []T { return t.Items },
		func(k int64, items []T) top[T] { return top[T]{k, items} })
}

// merge keeps the values of the larger key of a and b (both on a tie).
func (a top[T]) merge(b top[T]) top[T] {
	switch {
	case len(b.Items) == 0 || b.Key < a.Key:
		return a
	case len(a.Items) == 0 || b.Key > a.Key:
		return top[T]{b.Key, append([]T(nil), b.Items...)}
	}
	return top[T]{a.Key, append(a.Items, b.Items...)}
}

// topAggregate is the aggregate function of a window's top, each value
// counting as of says.
func topAggregate[In, T any](c codec.Codec[top[T]], of func(In) top[T]) weir.AggregateFunction[In, top[T], top[T]] {
	return weir.AggregateFunction[In, top[T], top[T]]{
		Codec:  c,
		New:    func() top[T] { return top[T]{} },
		Add:    func(m top[T], v In) top[T] { return m.merge(of(v)) },
		Merge:  top[T].merge,
		Result: func(m top[T]) top[T] { return m },
	}
}

// q5TopCodec is the codec of q5's auctions with the most bids.
var q5TopCodec = topCodec[int64](codec.Int64())

// Q7Row is a row of q7: a bid with the highest price of its window.
type Q7Row struct {
	Auction   int64  `json:"auction"`
	Price     int64  `json:"price"`
	Bidder    int64  `json:"bidder"`
	DateTime  int64  `json:"dateTime"`
	Extra     string `json:"extra"`
	StartTime int64  `json:"starttime"`
	EndTime   int64  `json:"endtime"`
}

// q7Bid is what q7 keeps of a bid.
type q7Bid struct {
	Auction, Price, Bidder, DateTime int64
	Extra                            string
}

// errCorrupt is the error of the queries' codecs for a bad encoding.
var errCorrupt = errors.New("queries: corrupt encoding")

// q7TopCodec is the codec of q7's bids with the highest price.
var q7TopCodec = topCodec(q7BidCodec)

// q7Buckets is how many keys the first stage of q7 spreads the bids of a
// window over (by price), to share the work among subtasks.
const q7Buckets = 64

// Q7 is Nexmark's q7, highest bid: the bids with the highest price of
// every tumbling window of 10 s, each bid in its window [start, end).
// Flink's SQL takes the bids BETWEEN end - 10 s AND end, inclusive: a
// bid at exactly end with the window's highest price is a row of the
// window too there, not here (the README says more). A first window
// stage finds the highest bids of each bucket of prices, a second one,
// per window, the highest of those.
func Q7(events *weir.Stream[nexmark.Event]) *weir.Stream[Q7Row] {
	bids := weir.FlatMap(events, func(e nexmark.Event, emit func(q7Bid)) {
		if b := e.Bid; b != nil {
			emit(q7Bid{b.Auction, b.Price, b.Bidder, b.DateTime, b.Extra})
		}
	}).WithCodec(q7BidCodec).Name("q7 bids")
	window := weir.TumblingWindows(10 * time.Second)
	perBucket := weir.KeyBy(bids, func(b q7Bid) int64 { return b.Price % q7Buckets }, codec.Int64())
	partial := weir.WindowAggregate(weir.Window(perBucket, window),
		topAggregate(q7TopCodec, func(b q7Bid) top[q7Bid] { return top[q7Bid]{b.Price, []q7Bid{b}} }),
		q7TopCodec).Name("q7 highest per bucket").UID("q7 highest per bucket")
	perWindow := weir.KeyBy(partial, func(w weir.Windowed[int64, top[q7Bid]]) int64 { return w.Window.Start }, codec.Int64())
	highest := weir.WindowAggregate(weir.Window(perWindow, window),
		topAggregate(q7TopCodec, func(w weir.Windowed[int64, top[q7Bid]]) top[q7Bid] { return w.Value }),
		q7TopCodec).Name("q7 highest").UID("q7 highest")
	return weir.FlatMap(highest, func(w weir.Windowed[int64, top[q7Bid]], emit func(Q7Row)) {
		for _, b := range w.Value.Items {
			emit(Q7Row{b.Auction, b.Price, b.Bidder, b.DateTime, b.Extra, w.Window.Start, w.Window.End})
		}
	}).WithCodec(q7RowCodec).Name("q7")
}

// Q8Row is a row of q8: a person who created an auction in the window of
// 10 s they joined in.
type Q8Row struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	StartTime int64  `json:"starttime"`
	EndTime   int64  `json:"endtime"`
}

var q8RowCodec = codec.Struct4(codec.Int64(), func(r Q8Row) int64 { return r.ID },
	codec.String(), func(r Q8Row) string { return r.Name },
	codec.Int64(), func(r Q8Row) int64 { return r.StartTime },
	codec.Int64(), func(r Q8Row) int64 { return r.EndTime },
	func(id int64, n string, s, e int64) Q8Row { return Q8Row{id, n, s, e} })

// q8Person is what q8 keeps of a person.
type q8Person struct {
	ID       int64
	Name     string
	DateTime int64
}

var q8PersonCodec = codec.Struct3(codec.Int64(), func(p q8Person) int64 { return p.ID },
	codec.String(), func(p q8Person) string { return p.Name },
	codec.Int64(), func(p q8Person) int64 { return p.DateTime },
	func(id int64, n string, d int64) q8Person { return q8Person{id, n, d} })

// q8Window is the length of q8's tumbling windows.
const q8Window = 10 * time.Second

// Q8 is Nexmark's q8, monitoring new users: the people who joined and
// created an auction in the same tumbling window of 10 s (a window
// coGroup of persons and auctions on id = seller, one row per person and
// window however many auctions).
func Q8(events *weir.Stream[nexmark.Event]) *weir.Stream[Q8Row] {
	// A coGroup by hand: persons and sellers tagged in one stream (a
	// stream read by two operators is not chained to them), keyed by
	// person, in tumbling windows.
	sides := weir.FlatMap(events, func(e nexmark.Event, emit func(q8In)) {
		if p := e.Person; p != nil {
			emit(q8In{Person: q8Person{p.ID, p.Name, p.DateTime}, IsPerson: true})
		} else if a := e.Auction; a != nil {
			emit(q8In{Seller: a.Seller})
		}
	}).WithCodec(q8InCodec).Name("q8 persons and sellers")
	perPerson := weir.KeyBy(sides, func(in q8In) int64 {
		if in.IsPerson {
			return in.Person.ID
		}
		return in.Seller
	}, codec.Int64())
	return weir.WindowProcess(weir.Window(perPerson, weir.TumblingWindows(q8Window)),
		func(_ int64, w weir.TimeWindow, ins []q8In, out *weir.Collector[Q8Row]) error {
			var person *q8Person
			sold := false
			for i := range ins {
				if ins[i].IsPerson {
					person = &ins[i].Person
				} else {
					sold = true
				}
			}
			// Person ids are unique: one person per key and window.
			if person != nil && sold {
				out.Emit(Q8Row{person.ID, person.Name, w.Start, w.End})
			}
			return nil
		}, q8RowCodec).Name("q8").UID("q8")
}

// q8In is a person or an auction's seller, for q8.
type q8In struct {
	Person   q8Person
	Seller   int64
	IsPerson bool
}

var q8InCodec = codec.Func(func(dst []byte, in q8In) []byte {
	if in.IsPerson {
		return q8PersonCodec.Append(append(dst, 1), in.Person)
	}
	return binary.AppendVarint(append(dst, 0), in.Seller)
}, func(src []byte) (q8In, error) {
	if len(src) == 0 {
		return q8In{}, errCorrupt
	}
	if src[0] == 1 {
		p, err := q8PersonCodec.Decode(src[1:])
		return q8In{Person: p, IsPerson: true}, err
	}
	s, n := binary.Varint(src[1:])
	if n <= 0 || n != len(src)-1 {
		return q8In{}, errCorrupt
	}
	return q8In{Seller: s}, nil
})

// Q11Row is a row of q11: a bidder's session and its number of bids.
type Q11Row struct {
	Bidder    int64 `json:"bidder"`
	BidCount  int64 `json:"bid_count"`
	StartTime int64 `json:"starttime"`
	EndTime   int64 `json:"endtime"`
}

var q11RowCodec = codec.Struct4(codec.Int64(), func(r Q11Row) int64 { return r.Bidder },
	codec.Int64(), func(r Q11Row) int64 { return r.BidCount },
	codec.Int64(), func(r Q11Row) int64 { return r.StartTime },
	codec.Int64(), func(r Q11Row) int64 { return r.EndTime },
	func(b, n, s, e int64) Q11Row { return Q11Row{b, n, s, e} })

// Q11 is Nexmark's q11, user sessions: per bidder, the sessions of bids
// no more than 10 s apart, and their number of bids (a session of bids at
// t1 … tn is [t1, tn + 10 s)).
func Q11(events *weir.Stream[nexmark.Event]) *weir.Stream[Q11Row] {
	bidders := weir.FlatMap(events, func(e nexmark.Event, emit func(int64)) {
		if b := e.Bid; b != nil {
			emit(b.Bidder)
		}
	}).WithCodec(codec.Int64()).Name("q11 bidders")
	sessions := weir.WindowAggregate(weir.Window(weir.KeyBy(bidders, func(b int64) int64 { return b }, codec.Int64()),
		weir.SessionWindows(10*time.Second)), count[int64](), codec.Int64()).Name("q11 sessions").UID("q11 sessions")
	return weir.Map(sessions, func(w weir.Windowed[int64, int64]) Q11Row {
		return Q11Row{w.Key, w.Value, w.Window.Start, w.Window.End}
	}).WithCodec(q11RowCodec).Name("q11")
}
