package batch

import (
	"iter"

	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
	"github.com/weirstream/weir/examples/nexmark/internal/queries"
)

// Q3 joins every auction of category 10 with its seller, if the seller
// lives in OR, ID or CA (whenever either came).
func Q3(events iter.Seq[nexmark.Event]) []queries.Q3Row {
	persons := map[int64]nexmark.Person{}
	var auctions []nexmark.Auction
	for e := range events {
		if p := e.Person; p != nil && (p.State == "OR" || p.State == "ID" || p.State == "CA") {
			persons[p.ID] = *p
		}
		if a := e.Auction; a != nil && a.Category == 10 {
			auctions = append(auctions, *a)
		}
	}
	var out []queries.Q3Row
	for _, a := range auctions {
		if p, ok := persons[a.Seller]; ok {
			out = append(out, queries.Q3Row{Name: p.Name, City: p.City, State: p.State, ID: a.ID})
		}
	}
	return out
}

// winners returns, per auction, the best of the bids dated within its
// life (dateTime ≤ bid dateTime ≤ expires), by better.
func winners(events iter.Seq[nexmark.Event], better func(x, y nexmark.Bid) bool) (map[int64]nexmark.Auction, map[int64]nexmark.Bid) {
	auctions := map[int64]nexmark.Auction{}
	var bids []nexmark.Bid
	for e := range events {
		if a := e.Auction; a != nil {
			auctions[a.ID] = *a
		}
		if b := e.Bid; b != nil {
			bids = append(bids, *b)
		}
	}
	best := map[int64]nexmark.Bid{}
	for _, b := range bids {
		a, ok := auctions[b.Auction]
		if !ok || b.DateTime < a.DateTime || b.DateTime > a.Expires {
			continue
		}
		if cur, ok := best[a.ID]; !ok || better(b, cur) {
			best[a.ID] = b
		}
	}
	return auctions, best
}

// Q4 is the final answer of q4: per category, the integer average of its
// auctions' highest prices (auctions without a bid in their life do not
// count).
func Q4(events iter.Seq[nexmark.Event]) []queries.Q4Row {
	auctions, best := winners(events, func(x, y nexmark.Bid) bool { return x.Price > y.Price })
	sum, n := map[int64]int64{}, map[int64]int64{}
	for id, b := range best {
		c := auctions[id].Category
		sum[c] += b.Price
		n[c]++
	}
	var out []queries.Q4Row
	for c, s := range sum {
		out = append(out, queries.Q4Row{ID: c, Final: s / n[c]})
	}
	return out
}

// Q9 is the final answer of q9: every auction with a bid in its life,
// with its best bid (queries.BetterBid).
func Q9(events iter.Seq[nexmark.Event]) []queries.Q9Row {
	auctions, best := winners(events, queries.BetterBid)
	var out []queries.Q9Row
	for id, b := range best {
		out = append(out, queries.NewQ9Row(auctions[id], b))
	}
	return out
}
