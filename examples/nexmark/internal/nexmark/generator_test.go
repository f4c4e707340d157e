package nexmark

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func mustNew(t testing.TB, cfg Config) *Generator {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Event is a pure function of the seed and the event number: two
// generators, a clone and any order of calls agree; another seed differs.
func TestGeneratorDeterministic(t *testing.T) {
	a, b := mustNew(t, Config{Seed: 7}), mustNew(t, Config{Seed: 7})
	c := a.Clone()
	other := mustNew(t, Config{Seed: 8})
	same := 0
	for _, n := range []int64{0, 1, 2, 3, 4, 49, 50, 51, 999, 123456, 77, 5} {
		ea, eb, ec := a.Event(n), b.Event(n), c.Event(n)
		if !reflect.DeepEqual(ea, eb) || !reflect.DeepEqual(ea, ec) {
			t.Fatalf("event %d: %+v, %+v, %+v", n, ea, eb, ec)
		}
		if reflect.DeepEqual(ea, other.Event(n)) {
			same++
		}
	}
	if same != 0 {
		t.Fatalf("%d events equal under another seed", same)
	}
}

// On 1 M events: the proportions are exactly 1:3:46; person and auction
// ids count up from 1000 in event order; every reference is to a person
// or auction created before or one of the next IDLead; the hot auction,
// sellers and bidders get their shares; event time advances with the
// event number at the rate; the extras pad events to their average sizes.
func TestGeneratorRules(t *testing.T) {
	const n = 1_000_000
	g := mustNew(t, Config{Seed: 1, Rate: 50_000})
	var persons, auctions, bids int64
	lastPerson, lastAuction := int64(FirstPersonID-1), int64(FirstAuctionID-1)
	var hotAuction, hotBidder, hotSeller, bidSize, auctionSize, personSize int64
	var prevTS int64
	minPrice, maxPrice := int64(1<<62), int64(0)
	var categories [NumCategories]int64
	for i := range int64(n) {
		e := g.Event(i)
		ts := e.DateTime()
		if want := g.Config().BaseTime + i*1000/50_000; ts != want || ts < prevTS {
			t.Fatalf("event %d at %d, want %d (previous %d)", i, ts, want, prevTS)
		}
		prevTS = ts
		switch e.Kind() {
		case KindPerson:
			p := e.Person
			persons++
			if p.ID != lastPerson+1 {
				t.Fatalf("event %d: person %d after %d", i, p.ID, lastPerson)
			}
			lastPerson = p.ID
			personSize += int64(8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State) + len(p.Extra))
		case KindAuction:
			a := e.Auction
			auctions++
			if a.ID != lastAuction+1 {
				t.Fatalf("event %d: auction %d after %d", i, a.ID, lastAuction)
			}
			lastAuction = a.ID
			if a.Seller < FirstPersonID || a.Seller > lastPerson+IDLead {
				t.Fatalf("event %d: seller %d, last person %d", i, a.Seller, lastPerson)
			}
			if a.Expires <= a.DateTime || a.Reserve <= a.InitialBid {
				t.Fatalf("event %d: auction %+v", i, a)
			}
			if (a.Seller-FirstPersonID)%100 == 0 && a.Seller-FirstPersonID == (lastPerson-FirstPersonID)/100*100 {
				hotSeller++
			}
			categories[a.Category-FirstCategoryID]++
			auctionSize += int64(8 + len(a.ItemName) + len(a.Description) + 40 + len(a.Extra))
		case KindBid:
			b := e.Bid
			bids++
			if b.Auction < FirstAuctionID || b.Auction > lastAuction+IDLead {
				t.Fatalf("event %d: bid for auction %d, last auction %d", i, b.Auction, lastAuction)
			}
			if b.Bidder < FirstPersonID || b.Bidder > lastPerson+IDLead {
				t.Fatalf("event %d: bidder %d, last person %d", i, b.Bidder, lastPerson)
			}
			if b.Auction-FirstAuctionID == (lastAuction-FirstAuctionID)/100*100 {
				hotAuction++
			}
			if b.Bidder-FirstPersonID == (lastPerson-FirstPersonID)/100*100+1 {
				hotBidder++
			}
			minPrice, maxPrice = min(minPrice, b.Price), max(maxPrice, b.Price)
			bidSize += int64(32 + len(b.Extra))
			if b.Channel == "" || b.URL == "" {
				t.Fatalf("event %d: bid %+v", i, b)
			}
		}
	}
	if persons != n/50 || auctions != 3*n/50 || bids != 46*n/50 {
		t.Fatalf("%d persons, %d auctions, %d bids", persons, auctions, bids)
	}
	between := func(what string, v, lo, hi float64) {
		t.Helper()
		if v < lo || v > hi {
			t.Errorf("%s: %.4f, want [%.4f, %.4f]", what, v, lo, hi)
		}
	}
	// Hot choices come with probability 1/2 (auction) and 3/4 (bidder,
	// seller), plus what the random choices hit.
	between("hot auction share", float64(hotAuction)/float64(bids), 0.49, 0.52)
	between("hot bidder share", float64(hotBidder)/float64(bids), 0.745, 0.76)
	between("hot seller share", float64(hotSeller)/float64(auctions), 0.74, 0.76)
	between("average bid size", float64(bidSize)/float64(bids), 98, 102)
	between("average auction size", float64(auctionSize)/float64(auctions), 490, 510)
	between("average person size", float64(personSize)/float64(persons), 195, 205)
	for c, k := range categories {
		between("category share", float64(k)/float64(auctions), 0.19, 0.21)
		_ = c
	}
	if minPrice < 100 || maxPrice > 100_000_000 || maxPrice < 50_000_000 {
		t.Errorf("prices in [%d, %d]", minPrice, maxPrice)
	}
}

// With out-of-order groups, the events of a group come permuted: every
// event number appears once, and no event trails an earlier one by
// MaxDisorder or more.
func TestGeneratorDisorder(t *testing.T) {
	g := mustNew(t, Config{Seed: 3, Rate: 1000, OutOfOrderGroupSize: 3000})
	seen := map[int64]bool{}
	var maxTS, worst int64
	const n = 30_000
	for i := range int64(n) {
		id := g.Adjusted(i)
		if seen[id] || id < 0 || id >= n {
			t.Fatalf("position %d: event number %d (seen %v)", i, id, seen[id])
		}
		seen[id] = true
		ts := g.Event(i).DateTime()
		maxTS = max(maxTS, ts)
		worst = max(worst, maxTS-ts)
	}
	if worst == 0 || worst >= MaxDisorder.Milliseconds() {
		t.Fatalf("disorder %d ms", worst)
	}
	if _, err := New(Config{Rate: 1000, OutOfOrderGroupSize: 4000}); err == nil {
		t.Fatal("groups spanning 4 s accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Rate: -1},
		{PersonProportion: 1},
		{HotAuctionRatio: -1},
		{NumActivePeople: -5},
		{AvgBidByteSize: -1},
		{OutOfOrderGroupSize: 953},
		{OutOfOrderGroupSize: -2},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v): no error", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// The codecs round-trip every kind of event, and every truncation or
// corruption of an encoding is an error, never a panic.
func TestEventCodec(t *testing.T) {
	g := mustNew(t, Config{Seed: 5})
	var c EventCodec
	for i := range int64(200) {
		e := g.Event(i)
		b := c.Append(nil, e)
		got, err := c.Decode(b)
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("event %d: %+v, %v; want %+v", i, got, err, e)
		}
		for k := range len(b) {
			if _, err := c.Decode(b[:k]); err == nil {
				t.Fatalf("event %d truncated to %d bytes: no error", i, k)
			}
		}
		if _, err := c.Decode(append(bytes.Clone(b), 0)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("trailing byte: %v", err)
		}
	}
	if _, err := c.Decode([]byte{9, 1}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown kind: %v", err)
	}
	bid := *g.Event(10).Bid
	if got, err := (BidCodec{}).Decode(BidCodec{}.Append(nil, bid)); err != nil || got != bid {
		t.Fatalf("bid: %+v, %v", got, err)
	}
	a := *g.Event(1).Auction
	if got, err := (AuctionCodec{}).Decode(AuctionCodec{}.Append(nil, a)); err != nil || got != a {
		t.Fatalf("auction: %+v, %v", got, err)
	}
	p := *g.Event(0).Person
	if got, err := (PersonCodec{}).Decode(PersonCodec{}.Append(nil, p)); err != nil || got != p {
		t.Fatalf("person: %+v, %v", got, err)
	}
}
