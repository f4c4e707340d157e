package queries

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
)

// Bids returns the bids of the event stream (Nexmark's bid view).
func Bids(events *weir.Stream[nexmark.Event]) *weir.Stream[nexmark.Bid] {
	return weir.FlatMap(events, func(e nexmark.Event, emit func(nexmark.Bid)) {
		if e.Bid != nil {
			emit(*e.Bid)
		}
	}).WithCodec(nexmark.BidCodec{}).Name("bids")
}

// Auctions returns the auctions of the event stream.
func Auctions(events *weir.Stream[nexmark.Event]) *weir.Stream[nexmark.Auction] {
	return weir.FlatMap(events, func(e nexmark.Event, emit func(nexmark.Auction)) {
		if e.Auction != nil {
			emit(*e.Auction)
		}
	}).WithCodec(nexmark.AuctionCodec{}).Name("auctions")
}

// Persons returns the persons of the event stream.
func Persons(events *weir.Stream[nexmark.Event]) *weir.Stream[nexmark.Person] {
	return weir.FlatMap(events, func(e nexmark.Event, emit func(nexmark.Person)) {
		if e.Person != nil {
			emit(*e.Person)
		}
	}).WithCodec(nexmark.PersonCodec{}).Name("persons")
}

// Q0Row is a row of q0 (pass-through): a bid's columns.
type Q0Row struct {
	Auction  int64  `json:"auction"`
	Bidder   int64  `json:"bidder"`
	Price    int64  `json:"price"`
	DateTime int64  `json:"dateTime"`
	Extra    string `json:"extra"`
}

// Q0 is Nexmark's q0, pass-through: every bid, projected (SELECT
// auction, bidder, price, dateTime, extra FROM bid). It measures the
// source and the runtime's own cost.
func Q0(events *weir.Stream[nexmark.Event]) *weir.Stream[Q0Row] {
	return weir.FlatMap(events, func(e nexmark.Event, emit func(Q0Row)) {
		if b := e.Bid; b != nil {
			emit(Q0Row{b.Auction, b.Bidder, b.Price, b.DateTime, b.Extra})
		}
	}).WithCodec(q0RowCodec).Name("q0")
}

// Euros is a price in euros with three decimals, exactly (SQL's
// DECIMAL(23, 3)): the value is thousandths.
type Euros int64

// MarshalJSON writes the decimal number, e.g. 90.800.
func (e Euros) MarshalJSON() ([]byte, error) {
	v := int64(e)
	b := make([]byte, 0, 24)
	if v < 0 {
		b, v = append(b, '-'), -v
	}
	b = strconv.AppendInt(b, v/1000, 10)
	b = append(b, '.', byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
	return b, nil
}

// UnmarshalJSON reads a number with at most three decimals.
func (e *Euros) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	if err != nil {
		return err
	}
	*e = Euros(math.Round(f * 1000))
	return nil
}

// Q1Row is a row of q1: a bid with its price in euros.
type Q1Row struct {
	Auction  int64  `json:"auction"`
	Bidder   int64  `json:"bidder"`
	Price    Euros  `json:"price"`
	DateTime int64  `json:"dateTime"`
	Extra    string `json:"extra"`
}

// Q1 is Nexmark's q1, currency conversion: every bid with its price
// converted from dollars to euros (0.908 · price, exactly, to the
// thousandth).
func Q1(events *weir.Stream[nexmark.Event]) *weir.Stream[Q1Row] {
	return weir.FlatMap(events, func(e nexmark.Event, emit func(Q1Row)) {
		if b := e.Bid; b != nil {
			emit(Q1Row{b.Auction, b.Bidder, Euros(908 * b.Price), b.DateTime, b.Extra})
		}
	}).WithCodec(q1RowCodec).Name("q1")
}

// Q2Row is a row of q2.
type Q2Row struct {
	Auction int64 `json:"auction"`
	Price   int64 `json:"price"`
}

// Q2 is Nexmark's q2, selection: the bids on every 123rd auction
// (auction mod 123 = 0), their auction and price.
func Q2(events *weir.Stream[nexmark.Event]) *weir.Stream[Q2Row] {
	return weir.FlatMap(events, func(e nexmark.Event, emit func(Q2Row)) {
		if b := e.Bid; b != nil && b.Auction%123 == 0 {
			emit(Q2Row{b.Auction, b.Price})
		}
	}).WithCodec(codec.Struct2(codec.Int64(), func(r Q2Row) int64 { return r.Auction },
		codec.Int64(), func(r Q2Row) int64 { return r.Price },
		func(a, p int64) Q2Row { return Q2Row{a, p} })).Name("q2")
}
