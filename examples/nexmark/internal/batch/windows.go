package batch

import (
	"iter"
	"slices"

	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
	"github.com/weirstream/weir/examples/nexmark/internal/queries"
)

// floorTo is t rounded down to a multiple of size.
func floorTo(t, size int64) int64 {
	r := t % size
	if r < 0 {
		r += size
	}
	return t - r
}

// Q5 counts the bids of each auction in every window [s, s+10 s) with s a
// multiple of 2 s, and returns per window the auctions with the largest
// count.
func Q5(events iter.Seq[nexmark.Event]) []queries.Q5Row {
	const size, slide = 10_000, 2_000
	counts := map[int64]map[int64]int64{} // window start → auction → bids
	for e := range events {
		b := e.Bid
		if b == nil {
			continue
		}
		for s := floorTo(b.DateTime, slide); s > b.DateTime-size; s -= slide {
			if counts[s] == nil {
				counts[s] = map[int64]int64{}
			}
			counts[s][b.Auction]++
		}
	}
	var out []queries.Q5Row
	for s, per := range counts {
		var most int64
		for _, n := range per {
			most = max(most, n)
		}
		for a, n := range per {
			if n == most {
				out = append(out, queries.Q5Row{Auction: a, Num: n, StartTime: s, EndTime: s + size})
			}
		}
	}
	return out
}

// Q7 returns, for every window [s, s+10 s) with s a multiple of 10 s, the
// bids of the window with its highest price.
func Q7(events iter.Seq[nexmark.Event]) []queries.Q7Row {
	const size = 10_000
	top := map[int64][]nexmark.Bid{}
	for e := range events {
		b := e.Bid
		if b == nil {
			continue
		}
		s := floorTo(b.DateTime, size)
		switch cur := top[s]; {
		case len(cur) == 0 || b.Price > cur[0].Price:
			top[s] = []nexmark.Bid{*b}
		case b.Price == cur[0].Price:
			top[s] = append(cur, *b)
		}
	}
	var out []queries.Q7Row
	for s, bs := range top {
		for _, b := range bs {
			out = append(out, queries.Q7Row{Auction: b.Auction, Price: b.Price, Bidder: b.Bidder, DateTime: b.DateTime, Extra: b.Extra,
				StartTime: s, EndTime: s + size})
		}
	}
	return out
}

// Q8 returns the persons who created an auction in the 10-s window
// (multiple of 10 s) they joined in.
func Q8(events iter.Seq[nexmark.Event]) []queries.Q8Row {
	const size = 10_000
	type key struct{ id, start int64 }
	persons := map[key]string{}
	sold := map[key]bool{}
	for e := range events {
		if p := e.Person; p != nil {
			persons[key{p.ID, floorTo(p.DateTime, size)}] = p.Name
		}
		if a := e.Auction; a != nil {
			sold[key{a.Seller, floorTo(a.DateTime, size)}] = true
		}
	}
	var out []queries.Q8Row
	for k, name := range persons {
		if sold[k] {
			out = append(out, queries.Q8Row{ID: k.id, Name: name, StartTime: k.start, EndTime: k.start + size})
		}
	}
	return out
}

// Q11 returns every bidder's sessions: the bids sorted by time, a bid
// more than 10 s after the session's last one starts a new session; a
// session of bids at t1 … tn is [t1, tn + 10 s).
func Q11(events iter.Seq[nexmark.Event]) []queries.Q11Row {
	const gap = 10_000
	times := map[int64][]int64{}
	for e := range events {
		if b := e.Bid; b != nil {
			times[b.Bidder] = append(times[b.Bidder], b.DateTime)
		}
	}
	var out []queries.Q11Row
	for bidder, ts := range times {
		slices.Sort(ts)
		s := queries.Q11Row{Bidder: bidder, StartTime: ts[0], EndTime: ts[0] + gap}
		for _, t := range ts {
			if t > s.EndTime {
				out = append(out, s)
				s = queries.Q11Row{Bidder: bidder, StartTime: t, EndTime: t + gap}
			}
			s.EndTime = max(s.EndTime, t+gap)
			s.BidCount++
		}
		out = append(out, s)
	}
	return out
}
