package queries

import (
	"cmp"
	"encoding/binary"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
	"github.com/weirstream/weir/state"
)

// q3Person is what q3 keeps of a person.
type q3Person struct {
	ID                int64
	Name, City, State string
}

var q3PersonCodec = codec.Struct4(codec.Int64(), func(p q3Person) int64 { return p.ID },
	codec.String(), func(p q3Person) string { return p.Name },
	codec.String(), func(p q3Person) string { return p.City },
	codec.String(), func(p q3Person) string { return p.State },
	func(id int64, n, c, s string) q3Person { return q3Person{id, n, c, s} })

// q3Auction is what q3 keeps of an auction.
type q3Auction struct{ ID, Seller int64 }

var q3AuctionCodec = codec.Struct2(codec.Int64(), func(a q3Auction) int64 { return a.ID },
	codec.Int64(), func(a q3Auction) int64 { return a.Seller },
	func(id, s int64) q3Auction { return q3Auction{id, s} })

// Q3Row is a row of q3.
type Q3Row struct {
	Name  string `json:"name"`
	City  string `json:"city"`
	State string `json:"state"`
	ID    int64  `json:"id"`
}

var q3RowCodec = codec.Struct4(codec.String(), func(r Q3Row) string { return r.Name },
	codec.String(), func(r Q3Row) string { return r.City },
	codec.String(), func(r Q3Row) string { return r.State },
	codec.Int64(), func(r Q3Row) int64 { return r.ID },
	func(n, c, s string, id int64) Q3Row { return Q3Row{n, c, s, id} })

// Q3 is Nexmark's q3, local item suggestion: the auctions of category 10
// whose seller lives in Oregon, Idaho or California, with the seller's
// name, city and state (a regular inner join of auctions and persons on
// seller = id). Either side may come first: an auction waits in keyed
// state for its seller, a seller stays for the auctions to come.
func Q3(events *weir.Stream[nexmark.Event]) *weir.Stream[Q3Row] {
	// One operator reads the events and keys both sides by person: a
	// stream read by two operators is not chained to them, so each would
	// receive every event serialized.
	sides := weir.FlatMap(events, func(e nexmark.Event, emit func(q3In)) {
		if a := e.Auction; a != nil && a.Category == 10 {
			emit(q3In{Auction: q3Auction{a.ID, a.Seller}})
		} else if p := e.Person; p != nil && (p.State == "OR" || p.State == "ID" || p.State == "CA") {
			emit(q3In{Person: q3Person{p.ID, p.Name, p.City, p.State}, IsPerson: true})
		}
	}).WithCodec(q3InCodec).Name("q3 auctions and persons")
	perPerson := weir.KeyBy(sides, func(in q3In) int64 {
		if in.IsPerson {
			return in.Person.ID
		}
		return in.Auction.Seller
	}, codec.Int64())
	return weir.Process(perPerson, func() weir.KeyedProcessFunction[int64, q3In, Q3Row] { return &q3Join{} }).
		WithCodec(q3RowCodec).Name("q3").UID("q3")
}

// q3In is an auction or a person, for q3's join.
type q3In struct {
	Auction  q3Auction
	Person   q3Person
	IsPerson bool
}

var q3InCodec = codec.Func(func(dst []byte, in q3In) []byte {
	if in.IsPerson {
		return q3PersonCodec.Append(append(dst, 1), in.Person)
	}
	return q3AuctionCodec.Append(append(dst, 0), in.Auction)
}, func(src []byte) (q3In, error) {
	if len(src) == 0 {
		return q3In{}, errCorrupt
	}
	if src[0] == 1 {
		p, err := q3PersonCodec.Decode(src[1:])
		return q3In{Person: p, IsPerson: true}, err
	}
	a, err := q3AuctionCodec.Decode(src[1:])
	return q3In{Auction: a}, err
})

// q3Join joins auctions and persons per person id.
type q3Join struct {
	person  *state.ValueState[q3Person] // ID 0: not seen yet
	pending *state.ListState[int64]     // auctions waiting for the person
}

func (j *q3Join) Open(rc *weir.RuntimeContext) (err error) {
	if j.person, err = weir.ValueState(rc, "person", q3PersonCodec); err != nil {
		return err
	}
	j.pending, err = weir.ListState(rc, "pending auctions", codec.Int64())
	return err
}

func (j *q3Join) ProcessElement(_ int64, in q3In, out *weir.Collector[Q3Row]) error {
	if in.IsPerson {
		return j.newPerson(in.Person, out)
	}
	a := in.Auction
	p, err := j.person.Value()
	if err != nil {
		return err
	}
	if p.ID == 0 {
		return j.pending.Add(a.ID)
	}
	out.Emit(Q3Row{p.Name, p.City, p.State, a.ID})
	return nil
}

func (j *q3Join) newPerson(p q3Person, out *weir.Collector[Q3Row]) error {
	if err := j.person.Update(p); err != nil {
		return err
	}
	ids, err := j.pending.Get()
	if err != nil || len(ids) == 0 {
		return err
	}
	for _, id := range ids {
		out.Emit(Q3Row{p.Name, p.City, p.State, id})
	}
	return j.pending.Clear()
}

// winning is the join of q4 and q9: per auction, the best of the bids
// dated within the auction's life (from its dateTime to its expiry, both
// included), updated as bids arrive. A bid that comes before its auction
// waits in keyed state until the watermark passes its dateTime (an
// auction dated no later than the bid must have come by then); the
// auction and its best bid go once the watermark passes its expiry (no
// bid within its life can come after that). emit is called whenever the
// best bid changes, with the previous one (ok=false: none).
type winning[A, B, R any] struct {
	ac      codec.Codec[A]
	bc      codec.Codec[B]
	id      func(A) int64 // 0: no auction
	life    func(A) (start, end int64)
	bidTime func(B) int64 // 0: no bid
	better  func(x, y B) bool
	emit    func(a A, prev B, ok bool, best B, out *weir.Collector[R])

	auction *state.ValueState[A]
	best    *state.ValueState[B]
	pending *state.ListState[B]
	timers  *weir.TimerService
}

func (w *winning[A, B, R]) Open(rc *weir.RuntimeContext) (err error) {
	if w.auction, err = weir.ValueState(rc, "auction", w.ac); err != nil {
		return err
	}
	if w.best, err = weir.ValueState(rc, "best bid", w.bc); err != nil {
		return err
	}
	w.pending, err = weir.ListState(rc, "early bids", w.bc)
	w.timers = rc.Timers()
	return err
}

// wIn is an auction or a bid, for the winning-bid join.
type wIn[A, B any] struct {
	A     A
	B     B
	IsBid bool
}

// wInCodec encodes a wIn: a byte for the side, then the value.
func wInCodec[A, B any](ac codec.Codec[A], bc codec.Codec[B]) codec.Codec[wIn[A, B]] {
	return codec.Func(func(dst []byte, in wIn[A, B]) []byte {
		if in.IsBid {
			return bc.Append(append(dst, 1), in.B)
		}
		return ac.Append(append(dst, 0), in.A)
	}, func(src []byte) (wIn[A, B], error) {
		if len(src) == 0 {
			return wIn[A, B]{}, errCorrupt
		}
		if src[0] == 1 {
			b, err := bc.Decode(src[1:])
			return wIn[A, B]{B: b, IsBid: true}, err
		}
		a, err := ac.Decode(src[1:])
		return wIn[A, B]{A: a}, err
	})
}

func (w *winning[A, B, R]) ProcessElement(_ int64, in wIn[A, B], out *weir.Collector[R]) error {
	if in.IsBid {
		return w.bid(in.B, out)
	}
	return w.auctionArrived(in.A, out)
}

func (w *winning[A, B, R]) auctionArrived(a A, out *weir.Collector[R]) error {
	if err := w.auction.Update(a); err != nil {
		return err
	}
	start, end := w.life(a)
	if err := w.timers.RegisterEventTimeTimer(end); err != nil {
		return err
	}
	early, err := w.pending.Get()
	if err != nil || len(early) == 0 {
		return err
	}
	var best B
	found := false
	for _, b := range early {
		if t := w.bidTime(b); t >= start && t <= end && (!found || w.better(b, best)) {
			best, found = b, true
		}
	}
	if err := w.pending.Clear(); err != nil || !found {
		return err
	}
	var none B
	w.emit(a, none, false, best, out)
	return w.best.Update(best)
}

func (w *winning[A, B, R]) bid(b B, out *weir.Collector[R]) error {
	a, err := w.auction.Value()
	if err != nil {
		return err
	}
	t := w.bidTime(b)
	if w.id(a) == 0 {
		if err := w.pending.Add(b); err != nil {
			return err
		}
		return w.timers.RegisterEventTimeTimer(t)
	}
	if start, end := w.life(a); t < start || t > end {
		return nil
	}
	cur, err := w.best.Value()
	if err != nil {
		return err
	}
	ok := w.bidTime(cur) != 0
	if ok && !w.better(b, cur) {
		return nil
	}
	w.emit(a, cur, ok, b, out)
	return w.best.Update(b)
}

// OnTimer drops an expired auction, or the early bids the watermark
// passed.
func (w *winning[A, B, R]) OnTimer(_ int64, ts int64, _ weir.TimeDomain, _ *weir.Collector[R]) error {
	a, err := w.auction.Value()
	if err != nil {
		return err
	}
	if w.id(a) != 0 {
		if _, end := w.life(a); ts >= end {
			return cmp.Or(w.auction.Clear(), w.best.Clear())
		}
		return nil
	}
	early, err := w.pending.Get()
	if err != nil {
		return err
	}
	keep := early[:0]
	for _, b := range early {
		if w.bidTime(b) > ts {
			keep = append(keep, b)
		}
	}
	if len(keep) == 0 {
		return w.pending.Clear()
	}
	return w.pending.Update(keep)
}

// q4Auction is what q4 keeps of an auction.
type q4Auction struct{ ID, DateTime, Expires, Category int64 }

var q4AuctionCodec = codec.Struct4(codec.Int64(), func(a q4Auction) int64 { return a.ID },
	codec.Int64(), func(a q4Auction) int64 { return a.DateTime },
	codec.Int64(), func(a q4Auction) int64 { return a.Expires },
	codec.Int64(), func(a q4Auction) int64 { return a.Category },
	func(id, d, e, c int64) q4Auction { return q4Auction{id, d, e, c} })

// q4Bid is what q4 keeps of a bid.
type q4Bid struct{ Auction, Price, DateTime int64 }

var q4BidCodec = codec.Struct3(codec.Int64(), func(b q4Bid) int64 { return b.Auction },
	codec.Int64(), func(b q4Bid) int64 { return b.Price },
	codec.Int64(), func(b q4Bid) int64 { return b.DateTime },
	func(a, p, d int64) q4Bid { return q4Bid{a, p, d} })

// q4Change is a change of an auction's winning price: by delta, and
// whether it is the auction's first.
type q4Change struct {
	Category, Delta int64
	First           bool
}

var q4ChangeCodec = codec.Struct3(codec.Int64(), func(c q4Change) int64 { return c.Category },
	codec.Int64(), func(c q4Change) int64 { return c.Delta },
	codec.Bool(), func(c q4Change) bool { return c.First },
	func(cat, d int64, f bool) q4Change { return q4Change{cat, d, f} })

// Q4Row is a row of q4: a category's average winning price (the SQL's
// columns id and final).
type Q4Row struct {
	ID    int64 `json:"id"`
	Final int64 `json:"final"`
}

var q4RowCodec = codec.Struct2(codec.Int64(), func(r Q4Row) int64 { return r.ID },
	codec.Int64(), func(r Q4Row) int64 { return r.Final },
	func(id, f int64) Q4Row { return Q4Row{id, f} })

// Q4 is Nexmark's q4, the average winning price per category: per
// auction, the highest price of the bids dated within its life; per
// category, the average of those (in integers, as SQL's AVG of BIGINT).
// A row comes whenever a category's average changes.
func Q4(events *weir.Stream[nexmark.Event]) *weir.Stream[Q4Row] {
	sides := weir.FlatMap(events, func(e nexmark.Event, emit func(wIn[q4Auction, q4Bid])) {
		if a := e.Auction; a != nil {
			emit(wIn[q4Auction, q4Bid]{A: q4Auction{a.ID, a.DateTime, a.Expires, a.Category}})
		} else if b := e.Bid; b != nil {
			emit(wIn[q4Auction, q4Bid]{B: q4Bid{b.Auction, b.Price, b.DateTime}, IsBid: true})
		}
	}).WithCodec(wInCodec(q4AuctionCodec, q4BidCodec)).Name("q4 auctions and bids")
	perAuction := weir.KeyBy(sides, func(in wIn[q4Auction, q4Bid]) int64 {
		if in.IsBid {
			return in.B.Auction
		}
		return in.A.ID
	}, codec.Int64())
	changes := weir.Process(perAuction, func() weir.KeyedProcessFunction[int64, wIn[q4Auction, q4Bid], q4Change] {
		return &winning[q4Auction, q4Bid, q4Change]{
			ac: q4AuctionCodec, bc: q4BidCodec,
			id:      func(a q4Auction) int64 { return a.ID },
			life:    func(a q4Auction) (int64, int64) { return a.DateTime, a.Expires },
			bidTime: func(b q4Bid) int64 { return b.DateTime },
			better:  func(x, y q4Bid) bool { return x.Price > y.Price },
			emit: func(a q4Auction, prev q4Bid, ok bool, best q4Bid, out *weir.Collector[q4Change]) {
				out.Emit(q4Change{a.Category, best.Price - prev.Price, !ok})
			},
		}
	}).WithCodec(q4ChangeCodec).Name("q4 winning bids").UID("q4 winning bids")
	perCategory := weir.KeyBy(changes, func(c q4Change) int64 { return c.Category }, codec.Int64())
	return weir.Process(perCategory, func() weir.KeyedProcessFunction[int64, q4Change, Q4Row] { return &q4Average{} }).
		WithCodec(q4RowCodec).Name("q4").UID("q4")
}

// q4Avg is a category's sum and count of winning prices, and the average
// it emitted last.
type q4Avg struct{ Sum, Count, Last int64 }

var q4AvgCodec = codec.Struct3(codec.Int64(), func(a q4Avg) int64 { return a.Sum },
	codec.Int64(), func(a q4Avg) int64 { return a.Count },
	codec.Int64(), func(a q4Avg) int64 { return a.Last },
	func(s, c, l int64) q4Avg { return q4Avg{s, c, l} })

type q4Average struct{ avg *state.ValueState[q4Avg] }

func (q *q4Average) Open(rc *weir.RuntimeContext) (err error) {
	q.avg, err = weir.ValueState(rc, "average", q4AvgCodec)
	return err
}

func (q *q4Average) ProcessElement(cat int64, c q4Change, out *weir.Collector[Q4Row]) error {
	a, err := q.avg.Value()
	if err != nil {
		return err
	}
	a.Sum += c.Delta
	if c.First {
		a.Count++
	}
	if avg := a.Sum / a.Count; avg != a.Last || a.Count == 1 && c.First {
		a.Last = avg
		out.Emit(Q4Row{cat, avg})
	}
	return q.avg.Update(a)
}

// Q9Row is a row of q9: an auction and its winning bid.
type Q9Row struct {
	ID          int64  `json:"id"`
	ItemName    string `json:"itemName"`
	Description string `json:"description"`
	InitialBid  int64  `json:"initialBid"`
	Reserve     int64  `json:"reserve"`
	DateTime    int64  `json:"dateTime"`
	Expires     int64  `json:"expires"`
	Seller      int64  `json:"seller"`
	Category    int64  `json:"category"`
	Extra       string `json:"extra"`
	Auction     int64  `json:"auction"`
	Bidder      int64  `json:"bidder"`
	Price       int64  `json:"price"`
	BidDateTime int64  `json:"bid_dateTime"`
	BidExtra    string `json:"bid_extra"`
}

// NewQ9Row is the row of auction a won by bid b.
func NewQ9Row(a nexmark.Auction, b nexmark.Bid) Q9Row {
	return Q9Row{a.ID, a.ItemName, a.Description, a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category, a.Extra,
		b.Auction, b.Bidder, b.Price, b.DateTime, b.Extra}
}

// BetterBid orders the bids of an auction as q9 ranks them: the higher
// price first, then the earlier dateTime (the SQL's ORDER BY price DESC,
// dateTime ASC); then, so that the winner never depends on the order the
// bids arrived in, the smaller bidder, extra, channel and url.
func BetterBid(x, y nexmark.Bid) bool {
	if c := cmp.Or(cmp.Compare(y.Price, x.Price), cmp.Compare(x.DateTime, y.DateTime), cmp.Compare(x.Bidder, y.Bidder),
		cmp.Compare(x.Extra, y.Extra), cmp.Compare(x.Channel, y.Channel), cmp.Compare(x.URL, y.URL)); c != 0 {
		return c < 0
	}
	return false
}

// Q9 is Nexmark's q9, winning bids: per auction, the best bid dated
// within its life (BetterBid), with all the auction's columns. A row
// comes whenever an auction's best bid changes; an auction's last row is
// its winner.
func Q9(events *weir.Stream[nexmark.Event]) *weir.Stream[Q9Row] {
	type in = wIn[nexmark.Auction, nexmark.Bid]
	sides := weir.FlatMap(events, func(e nexmark.Event, emit func(in)) {
		if a := e.Auction; a != nil {
			emit(in{A: *a})
		} else if b := e.Bid; b != nil {
			emit(in{B: *b, IsBid: true})
		}
	}).WithCodec(wInCodec[nexmark.Auction, nexmark.Bid](nexmark.AuctionCodec{}, nexmark.BidCodec{})).Name("q9 auctions and bids")
	perAuction := weir.KeyBy(sides, func(v in) int64 {
		if v.IsBid {
			return v.B.Auction
		}
		return v.A.ID
	}, codec.Int64())
	return weir.Process(perAuction, func() weir.KeyedProcessFunction[int64, in, Q9Row] {
		return &winning[nexmark.Auction, nexmark.Bid, Q9Row]{
			ac: nexmark.AuctionCodec{}, bc: nexmark.BidCodec{},
			id:      func(a nexmark.Auction) int64 { return a.ID },
			life:    func(a nexmark.Auction) (int64, int64) { return a.DateTime, a.Expires },
			bidTime: func(b nexmark.Bid) int64 { return b.DateTime },
			better:  BetterBid,
			emit: func(a nexmark.Auction, _ nexmark.Bid, _ bool, best nexmark.Bid, out *weir.Collector[Q9Row]) {
				out.Emit(NewQ9Row(a, best))
			},
		}
	}).WithCodec(q9RowCodec).Name("q9").UID("q9")
}

// q9RowCodec encodes a row as its auction's encoding, after its length,
// then its bid's.
var q9RowCodec = codec.Func(func(dst []byte, r Q9Row) []byte {
	a := nexmark.AuctionCodec{}.Append(nil, nexmark.Auction{ID: r.ID, ItemName: r.ItemName, Description: r.Description,
		InitialBid: r.InitialBid, Reserve: r.Reserve, DateTime: r.DateTime, Expires: r.Expires, Seller: r.Seller, Category: r.Category, Extra: r.Extra})
	dst = append(binary.AppendUvarint(dst, uint64(len(a))), a...)
	return nexmark.BidCodec{}.Append(dst, nexmark.Bid{Auction: r.Auction, Bidder: r.Bidder, Price: r.Price, DateTime: r.BidDateTime, Extra: r.BidExtra})
}, func(src []byte) (Q9Row, error) {
	n, k := binary.Uvarint(src)
	if k <= 0 || n > uint64(len(src)-k) {
		return Q9Row{}, errCorrupt
	}
	a, err := nexmark.AuctionCodec{}.Decode(src[k : k+int(n)])
	if err != nil {
		return Q9Row{}, err
	}
	b, err := nexmark.BidCodec{}.Decode(src[k+int(n):])
	if err != nil {
		return Q9Row{}, err
	}
	return NewQ9Row(a, b), nil
})
