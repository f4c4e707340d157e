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
		weir.AggregateFunction[weir.Windowed[int64, int64], q5Max, q5Max]{
			Codec: q5MaxCodec,
			New:   func() q5Max { return q5Max{} },
			Add: func(m q5Max, c weir.Windowed[int64, int64]) q5Max {
				return m.merge(q5Max{c.Value, c.Window.Start, []int64{c.Key}})
			},
			Merge:  q5Max.merge,
			Result: func(m q5Max) q5Max { return m },
		}, q5MaxCodec).Name("q5 hottest").UID("q5 hottest")
	return weir.FlatMap(hottest, func(w weir.Windowed[int64, q5Max], emit func(Q5Row)) {
		for _, a := range w.Value.Auctions {
			emit(Q5Row{a, w.Value.Num, w.Value.Start, w.Value.Start + 10_000})
		}
	}).WithCodec(q5RowCodec).Name("q5")
}

// q5Max is the largest count of bids of some auctions of a sliding
// window (starting at Start), and those auctions.
type q5Max struct {
	Num, Start int64
	Auctions   []int64
}

var q5MaxCodec = codec.Struct3(codec.Int64(), func(m q5Max) int64 { return m.Num },
	codec.Int64(), func(m q5Max) int64 { return m.Start },
	codec.Slice[int64](codec.Int64()), func(m q5Max) []int64 { return m.Auctions },
	func(n, s int64, as []int64) q5Max { return q5Max{n, s, as} })

// merge keeps the auctions of the larger count of a and b (both on a
// tie).
func (a q5Max) merge(b q5Max) q5Max {
	switch {
	case len(b.Auctions) == 0 || b.Num < a.Num:
		return a
	case len(a.Auctions) == 0 || b.Num > a.Num:
		return q5Max{b.Num, b.Start, append([]int64(nil), b.Auctions...)}
	}
	return q5Max{a.Num, a.Start, append(a.Auctions, b.Auctions...)}
}

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

// q7Max is the highest price of some bids of a window, and those bids
// with it.
type q7Max struct {
	Price int64
	Bids  []q7Bid
}

// errCorrupt is the error of the queries' codecs for a bad encoding.
var errCorrupt = errors.New("queries: corrupt encoding")

var q7MaxCodec = codec.Struct2(codec.Int64(), func(m q7Max) int64 { return m.Price },
	codec.Slice[q7Bid](q7BidCodec), func(m q7Max) []q7Bid { return m.Bids },
	func(p int64, bs []q7Bid) q7Max { return q7Max{p, bs} })

// merge keeps the bids of the higher price of a and b (both on a tie).
func (a q7Max) merge(b q7Max) q7Max {
	switch {
	case len(b.Bids) == 0 || b.Price < a.Price:
		return a
	case len(a.Bids) == 0 || b.Price > a.Price:
		return q7Max{b.Price, append([]q7Bid(nil), b.Bids...)}
	}
	return q7Max{a.Price, append(a.Bids, b.Bids...)}
}

// q7Buckets is how many keys the first stage of q7 spreads the bids of a
// window over (by price), to share the work among subtasks.
const q7Buckets = 64

// Q7 is Nexmark's q7, highest bid: the bids with the highest price of
// every tumbling window of 10 s. A first window stage finds the highest
// bids of each bucket of prices, a second one, per window, the highest of
// those.
func Q7(events *weir.Stream[nexmark.Event]) *weir.Stream[Q7Row] {
	bids := weir.FlatMap(events, func(e nexmark.Event, emit func(q7Bid)) {
		if b := e.Bid; b != nil {
			emit(q7Bid{b.Auction, b.Price, b.Bidder, b.DateTime, b.Extra})
		}
	}).WithCodec(q7BidCodec).Name("q7 bids")
	window := weir.TumblingWindows(10 * time.Second)
	perBucket := weir.KeyBy(bids, func(b q7Bid) int64 { return b.Price % q7Buckets }, codec.Int64())
	partial := weir.WindowAggregate(weir.Window(perBucket, window), weir.AggregateFunction[q7Bid, q7Max, q7Max]{
		Codec:  q7MaxCodec,
		New:    func() q7Max { return q7Max{} },
		Add:    func(m q7Max, b q7Bid) q7Max { return m.merge(q7Max{b.Price, []q7Bid{b}}) },
		Merge:  q7Max.merge,
		Result: func(m q7Max) q7Max { return m },
	}, q7MaxCodec).Name("q7 highest per bucket").UID("q7 highest per bucket")
	perWindow := weir.KeyBy(partial, func(w weir.Windowed[int64, q7Max]) int64 { return w.Window.Start }, codec.Int64())
	highest := weir.WindowAggregate(weir.Window(perWindow, window), weir.AggregateFunction[weir.Windowed[int64, q7Max], q7Max, q7Max]{
		Codec:  q7MaxCodec,
		New:    func() q7Max { return q7Max{} },
		Add:    func(m q7Max, w weir.Windowed[int64, q7Max]) q7Max { return m.merge(w.Value) },
		Merge:  q7Max.merge,
		Result: func(m q7Max) q7Max { return m },
	}, q7MaxCodec).Name("q7 highest").UID("q7 highest")
	return weir.FlatMap(highest, func(w weir.Windowed[int64, q7Max], emit func(Q7Row)) {
		for _, b := range w.Value.Bids {
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
