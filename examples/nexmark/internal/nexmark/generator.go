package nexmark

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// First ids and categories, as Nexmark's: small data sets still find
// matches in the queries.
const (
	FirstPersonID   = 1000
	FirstAuctionID  = 1000
	FirstCategoryID = 10
	NumCategories   = 5
)

// Look-ahead and skew constants of the Nexmark generator.
const (
	// IDLead is how far beyond the last person or auction created a
	// reference may point: bids and auctions may name one of the next 10
	// people or auctions, which appear a little later.
	IDLead = 10
	// hotRatio: hot auctions, sellers and bidders are the first (second,
	// for bidders) of each batch of 100 recent auctions or people.
	hotRatio      = 100
	hotChannels   = 2 // one bid in hotChannels comes from a hot channel
	numChannels   = 10_000
	minStringLen  = 3
	extraPoolSize = 1 << 20
)

// MaxDisorder bounds the generator's own disorder: the event time of an
// event may trail that of an earlier event (in event number) by less than
// this, so that a bounded out-of-orderness watermark of 4 s (Flink's
// Nexmark DDL) declares no event late.
const MaxDisorder = 4 * time.Second

// Config configures a Generator. Zero values mean the defaults, which are
// Nexmark's.
type Config struct {
	// Seed makes the events: the same seed, the same events.
	Seed uint64
	// Rate is the events per second of event time (default 10,000,000,
	// the rate of Flink's Nexmark benchmark). Event n happens at
	// BaseTime + n·1000/Rate ms.
	Rate int64
	// BaseTime is the event time of event 0, epoch ms (default
	// 1436918400000, 2015-07-15T00:00:00Z).
	BaseTime int64
	// PersonProportion, AuctionProportion and BidProportion are the
	// shares of each kind (default 1, 3, 46).
	PersonProportion, AuctionProportion, BidProportion int
	// HotAuctionRatio: 1 − 1/HotAuctionRatio of the bids are for the hot
	// auction (default 2). HotSellersRatio and HotBiddersRatio alike for
	// auctions' sellers and bids' bidders (default 4).
	HotAuctionRatio, HotSellersRatio, HotBiddersRatio int
	// NumInFlightAuctions is how many recent auctions a bid for a
	// non-hot auction chooses from (default 100); it also sets the
	// auctions' average length.
	NumInFlightAuctions int
	// NumActivePeople is how many recent people a non-hot seller or
	// bidder is chosen from (default 1000).
	NumActivePeople int
	// AvgPersonByteSize, AvgAuctionByteSize and AvgBidByteSize are the
	// average sizes the extra fields pad events to (default 200, 500,
	// 100).
	AvgPersonByteSize, AvgAuctionByteSize, AvgBidByteSize int
	// OutOfOrderGroupSize permutes the events within groups of that many
	// consecutive event numbers (default 1: in order), Nexmark's
	// disorder; the group's span of event time must stay below
	// MaxDisorder.
	OutOfOrderGroupSize int64
}

func (c *Config) ensureDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Rate == 0 {
		c.Rate = 10_000_000
	}
	if c.BaseTime == 0 {
		c.BaseTime = 1436918400000
	}
	if c.PersonProportion == 0 && c.AuctionProportion == 0 && c.BidProportion == 0 {
		c.PersonProportion, c.AuctionProportion, c.BidProportion = 1, 3, 46
	}
	def(&c.HotAuctionRatio, 2)
	def(&c.HotSellersRatio, 4)
	def(&c.HotBiddersRatio, 4)
	def(&c.NumInFlightAuctions, 100)
	def(&c.NumActivePeople, 1000)
	def(&c.AvgPersonByteSize, 200)
	def(&c.AvgAuctionByteSize, 500)
	def(&c.AvgBidByteSize, 100)
	if c.OutOfOrderGroupSize == 0 {
		c.OutOfOrderGroupSize = 1
	}
}

// Validate reports the first bad value of the configuration (after the
// defaults are applied).
func (c Config) Validate() error {
	c.ensureDefaults()
	switch {
	case c.Rate < 0:
		return fmt.Errorf("nexmark: rate %d must be positive", c.Rate)
	case c.PersonProportion <= 0 || c.AuctionProportion <= 0 || c.BidProportion <= 0:
		return fmt.Errorf("nexmark: proportions %d:%d:%d must all be positive", c.PersonProportion, c.AuctionProportion, c.BidProportion)
	case c.HotAuctionRatio <= 0 || c.HotSellersRatio <= 0 || c.HotBiddersRatio <= 0:
		return errors.New("nexmark: hot ratios must be positive")
	case c.NumInFlightAuctions <= 0 || c.NumActivePeople <= 0:
		return errors.New("nexmark: in-flight auctions and active people must be positive")
	case c.AvgPersonByteSize < 0 || c.AvgAuctionByteSize < 0 || c.AvgBidByteSize < 0:
		return errors.New("nexmark: average sizes must not be negative")
	case c.OutOfOrderGroupSize < 0 || c.OutOfOrderGroupSize%953 == 0:
		return fmt.Errorf("nexmark: out-of-order group size %d must be positive and not a multiple of 953", c.OutOfOrderGroupSize)
	}
	if span := c.OutOfOrderGroupSize * 1000 / c.Rate; span >= MaxDisorder.Milliseconds() {
		return fmt.Errorf("nexmark: out-of-order groups of %d events span %d ms of event time at %d events/s: the disorder must stay below %v",
			c.OutOfOrderGroupSize, span, c.Rate, MaxDisorder)
	}
	return nil
}

// Generator makes the events of one configuration. Event is a pure
// function of the event number; a Generator holds scratch space besides
// read-only tables, so each goroutine needs its own: Clone is cheap, it
// shares the tables.
type Generator struct {
	cfg    Config
	total  int64 // sum of the proportions
	pcg    rand.PCG
	rnd    *rand.Rand
	tables *tables
}

// tables are the generator's read-only strings, made once per seed.
type tables struct {
	extra    string                 // a pool of random letters the extras are cut from
	hotURLs  [4]string              // of the hot channels
	channels [numChannels][2]string // name, url
}

var (
	usStates    = []string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	usCities    = []string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	firstNames  = []string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastNames   = []string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}
	hotChannelN = []string{"Google", "Facebook", "Baidu", "Apple"}
)

// New returns a generator of cfg's events; a bad configuration is an
// error (see Validate).
func New(cfg Config) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ensureDefaults()
	g := &Generator{cfg: cfg, total: int64(cfg.PersonProportion + cfg.AuctionProportion + cfg.BidProportion)}
	g.rnd = rand.New(&g.pcg)
	g.tables = newTables(cfg.Seed)
	return g, nil
}

// Clone returns a generator of the same events, for another goroutine.
func (g *Generator) Clone() *Generator {
	c := &Generator{cfg: g.cfg, total: g.total, tables: g.tables}
	c.rnd = rand.New(&c.pcg)
	return c
}

// Config returns the generator's configuration, defaults applied.
func (g *Generator) Config() Config { return g.cfg }

func newTables(seed uint64) *tables {
	r := rand.New(rand.NewPCG(seed, 0x6e65786d61726b)) // "nexmark"
	t := &tables{}
	b := make([]byte, extraPoolSize)
	for i := 0; i < len(b); {
		for x, k := r.Uint64(), 0; k < 13 && i < len(b); k, i = k+1, i+1 {
			b[i] = byte('a' + x%26)
			x /= 26
		}
	}
	t.extra = string(b)
	for i := range t.hotURLs {
		t.hotURLs[i] = baseURL(r)
	}
	for i := range t.channels {
		url := baseURL(r)
		if r.IntN(10) > 0 {
			url += "&channel_id=" + strconv.FormatUint(uint64(reverse32(uint32(i))), 10)
		}
		t.channels[i] = [2]string{"channel-" + strconv.Itoa(i), url}
	}
	return t
}

// reverse32 is Nexmark's abs(Integer.reverse(i)) for a channel id.
func reverse32(x uint32) uint32 {
	var y uint32
	for range 32 {
		y = y<<1 | x&1
		x >>= 1
	}
	if int32(y) < 0 {
		return uint32(-int32(y))
	}
	return y
}

func baseURL(r *rand.Rand) string {
	return "https://www.nexmark.com/" + randString(r, 5, '_') + "/" + randString(r, 5, '_') + "/" +
		randString(r, 5, '_') + "/item.htm?query=1"
}

// randString is a string of minStringLen to maxLen−1 letters, with
// special in place of one letter in 13 on average, trimmed of special at
// both ends when it is a space. Each 64-bit draw makes 7 characters
// (338⁷ < 2⁶⁴, 338 = 13·26).
func randString(r *rand.Rand, maxLen int, special byte) string {
	n := minStringLen + r.IntN(maxLen-minStringLen)
	var buf [128]byte
	b := buf[:n]
	if n > len(buf) {
		b = make([]byte, n)
	}
	for i := 0; i < n; {
		for x, k := r.Uint64(), 0; k < 7 && i < n; k, i = k+1, i+1 {
			c := x % 338
			x /= 338
			if c < 26 {
				b[i] = special
			} else {
				b[i] = byte('a' + c%26)
			}
		}
	}
	if special == ' ' {
		return strings.Trim(string(b), " ")
	}
	return string(b)
}

// Adjusted returns the event number whose event comes at position n of
// the stream: n itself, or its place in the permutation of its
// out-of-order group.
func (g *Generator) Adjusted(n int64) int64 {
	s := g.cfg.OutOfOrderGroupSize
	if s == 1 {
		return n
	}
	base := n / s * s
	return base + n%s*953%s
}

// Timestamp returns the event time of event number n (epoch ms).
func (g *Generator) Timestamp(n int64) int64 {
	return g.cfg.BaseTime + n*1000/g.cfg.Rate
}

// KindOf returns the kind of event number n.
func (g *Generator) KindOf(n int64) Kind {
	off := n % g.total
	switch {
	case off < int64(g.cfg.PersonProportion):
		return KindPerson
	case off < int64(g.cfg.PersonProportion+g.cfg.AuctionProportion):
		return KindAuction
	}
	return KindBid
}

// LastPerson returns the base-0 id of the last person created at or
// before event number n (the id of n itself if it is a person).
func (g *Generator) LastPerson(n int64) int64 {
	epoch, off := n/g.total, n%g.total
	pp := int64(g.cfg.PersonProportion)
	if off >= pp {
		off = pp - 1
	}
	return epoch*pp + off
}

// LastAuction returns the base-0 id of the last auction created at or
// before event number n (−1 before the first).
func (g *Generator) LastAuction(n int64) int64 {
	epoch, off := n/g.total, n%g.total
	pp, ap := int64(g.cfg.PersonProportion), int64(g.cfg.AuctionProportion)
	switch {
	case off < pp:
		epoch--
		off = ap - 1
	case off >= pp+ap:
		off = ap - 1
	default:
		off -= pp
	}
	return epoch*ap + off
}

// Event returns the event at position n of the stream (n ≥ 0).
func (g *Generator) Event(n int64) Event {
	id := g.Adjusted(n)
	ts := g.Timestamp(id)
	g.pcg.Seed(g.cfg.Seed, uint64(id))
	switch g.KindOf(id) {
	case KindPerson:
		return Event{Person: g.person(id, ts)}
	case KindAuction:
		return Event{Auction: g.auction(id, ts)}
	}
	return Event{Bid: g.bid(id, ts)}
}

// nextPerson is a random recent (active) person, or one of the next
// IDLead people.
func (g *Generator) nextPerson(n int64) int64 {
	people := g.LastPerson(n) + 1
	active := min(people, int64(g.cfg.NumActivePeople))
	return people - active + g.rnd.Int64N(active+IDLead)
}

// nextAuction is a random in-flight auction, or one of the next IDLead.
func (g *Generator) nextAuction(n int64) int64 {
	last := g.LastAuction(n)
	lo := max(last-int64(g.cfg.NumInFlightAuctions), 0)
	return lo + g.rnd.Int64N(last-lo+1+IDLead)
}

func (g *Generator) price() int64 {
	return int64(math.Round(math.Pow(10, g.rnd.Float64()*6) * 100))
}

// extra pads an event of size current to desired bytes on average (±20 %).
func (g *Generator) extra(current, desired int) string {
	if current > desired {
		return ""
	}
	desired -= current
	delta := int(math.Round(float64(desired) * 0.2))
	size := desired - delta
	if delta > 0 {
		size += g.rnd.IntN(2 * delta)
	}
	if size >= extraPoolSize/2 {
		size = extraPoolSize/2 - 1
	}
	off := g.rnd.IntN(extraPoolSize - size)
	return g.tables.extra[off : off+size]
}

func (g *Generator) person(n, ts int64) *Person {
	r := g.rnd
	p := &Person{ID: g.LastPerson(n) + FirstPersonID, DateTime: ts}
	p.Name = firstNames[r.IntN(len(firstNames))] + " " + lastNames[r.IntN(len(lastNames))]
	p.EmailAddress = randString(r, 7, ' ') + "@" + randString(r, 5, ' ') + ".com"
	var cc [19]byte
	for i := range 4 {
		v := r.IntN(10000)
		j := i * 5
		cc[j], cc[j+1], cc[j+2], cc[j+3] = byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10)
		if i < 3 {
			cc[j+4] = ' '
		}
	}
	p.CreditCard = string(cc[:])
	p.City = usCities[r.IntN(len(usCities))]
	p.State = usStates[r.IntN(len(usStates))]
	size := 8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State)
	p.Extra = g.extra(size, g.cfg.AvgPersonByteSize)
	return p
}

func (g *Generator) auction(n, ts int64) *Auction {
	r := g.rnd
	a := &Auction{ID: g.LastAuction(n) + FirstAuctionID, DateTime: ts}
	if r.IntN(g.cfg.HotSellersRatio) > 0 {
		a.Seller = g.LastPerson(n) / hotRatio * hotRatio
	} else {
		a.Seller = g.nextPerson(n)
	}
	a.Seller += FirstPersonID
	a.Category = FirstCategoryID + int64(r.IntN(NumCategories))
	a.InitialBid = g.price()
	// Auctions last twice, on average, the time it takes to create
	// NumInFlightAuctions more.
	ahead := int64(g.cfg.NumInFlightAuctions) * g.total / int64(g.cfg.AuctionProportion)
	horizon := g.Timestamp(n+ahead) - ts
	a.Expires = ts + 1 + r.Int64N(max(2*horizon, 1))
	a.ItemName = randString(r, 20, ' ')
	a.Description = randString(r, 100, ' ')
	a.Reserve = a.InitialBid + g.price()
	size := 8 + len(a.ItemName) + len(a.Description) + 40
	a.Extra = g.extra(size, g.cfg.AvgAuctionByteSize)
	return a
}

func (g *Generator) bid(n, ts int64) *Bid {
	r := g.rnd
	b := &Bid{DateTime: ts}
	if r.IntN(g.cfg.HotAuctionRatio) > 0 {
		b.Auction = g.LastAuction(n) / hotRatio * hotRatio
	} else {
		b.Auction = g.nextAuction(n)
	}
	b.Auction += FirstAuctionID
	if r.IntN(g.cfg.HotBiddersRatio) > 0 {
		// The second of the batch, so that hot bidders are not the hot
		// sellers.
		b.Bidder = g.LastPerson(n)/hotRatio*hotRatio + 1
	} else {
		b.Bidder = g.nextPerson(n)
	}
	b.Bidder += FirstPersonID
	b.Price = g.price()
	if r.IntN(hotChannels) > 0 {
		i := r.IntN(len(hotChannelN))
		b.Channel, b.URL = hotChannelN[i], g.tables.hotURLs[i]
	} else {
		c := &g.tables.channels[r.IntN(numChannels)]
		b.Channel, b.URL = c[0], c[1]
	}
	b.Extra = g.extra(32, g.cfg.AvgBidByteSize)
	return b
}
