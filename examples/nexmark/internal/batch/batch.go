// Package batch computes the Nexmark queries' answers from the whole
// input at once, in plain Go: loops, maps and sorts, no streaming, no
// weir. It is the reference the streaming queries are verified against,
// so it follows the queries' SQL definitions directly and shares no code
// with package queries but the row types.
package batch

import (
	"iter"

	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
	"github.com/weirstream/weir/examples/nexmark/internal/queries"
)

// Events yields the generator's events 0 to n−1, in event-number order.
func Events(g *nexmark.Generator, n int64) iter.Seq[nexmark.Event] {
	return func(yield func(nexmark.Event) bool) {
		for i := range n {
			if !yield(g.Event(i)) {
				return
			}
		}
	}
}

// Q0 is every bid's auction, bidder, price, dateTime and extra.
func Q0(events iter.Seq[nexmark.Event]) []queries.Q0Row {
	var out []queries.Q0Row
	for e := range events {
		if b := e.Bid; b != nil {
			out = append(out, queries.Q0Row{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime, Extra: b.Extra})
		}
	}
	return out
}

// Q1 is every bid with 0.908 · price, in thousandths.
func Q1(events iter.Seq[nexmark.Event]) []queries.Q1Row {
	var out []queries.Q1Row
	for e := range events {
		if b := e.Bid; b != nil {
			out = append(out, queries.Q1Row{Auction: b.Auction, Bidder: b.Bidder, Price: queries.Euros(b.Price * 908),
				DateTime: b.DateTime, Extra: b.Extra})
		}
	}
	return out
}

// Q2 is the auction and price of the bids whose auction is a multiple of
// 123.
func Q2(events iter.Seq[nexmark.Event]) []queries.Q2Row {
	var out []queries.Q2Row
	for e := range events {
		if b := e.Bid; b != nil && b.Auction%123 == 0 {
			out = append(out, queries.Q2Row{Auction: b.Auction, Price: b.Price})
		}
	}
	return out
}
