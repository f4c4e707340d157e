package nexmark

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Person is a user who joined the auction site.
type Person struct {
	ID           int64  `json:"id"`
	Name         string `json:"name"`
	EmailAddress string `json:"emailAddress"`
	CreditCard   string `json:"creditCard"`
	City         string `json:"city"`
	State        string `json:"state"`
	DateTime     int64  `json:"dateTime"` // event time, epoch ms
	Extra        string `json:"extra"`
}

// Auction is an item put up for sale by a person (the seller).
type Auction struct {
	ID          int64  `json:"id"`
	ItemName    string `json:"itemName"`
	Description string `json:"description"`
	InitialBid  int64  `json:"initialBid"`
	Reserve     int64  `json:"reserve"`
	DateTime    int64  `json:"dateTime"` // event time, epoch ms
	Expires     int64  `json:"expires"`  // epoch ms
	Seller      int64  `json:"seller"`
	Category    int64  `json:"category"`
	Extra       string `json:"extra"`
}

// Bid is a person's (the bidder's) offer on an auction.
type Bid struct {
	Auction  int64  `json:"auction"`
	Bidder   int64  `json:"bidder"`
	Price    int64  `json:"price"`
	Channel  string `json:"channel"`
	URL      string `json:"url"`
	DateTime int64  `json:"dateTime"` // event time, epoch ms
	Extra    string `json:"extra"`
}

// Event is one event of the stream: exactly one of its fields is set.
type Event struct {
	Person  *Person
	Auction *Auction
	Bid     *Bid
}

// Kind is the kind of an event.
type Kind uint8

const (
	// KindPerson is a new person.
	KindPerson Kind = iota
	// KindAuction is a new auction.
	KindAuction
	// KindBid is a bid.
	KindBid
)

func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Kind returns the kind of the event.
func (e Event) Kind() Kind {
	switch {
	case e.Person != nil:
		return KindPerson
	case e.Auction != nil:
		return KindAuction
	}
	return KindBid
}

// DateTime returns the event's event time (epoch ms).
func (e Event) DateTime() int64 {
	switch {
	case e.Person != nil:
		return e.Person.DateTime
	case e.Auction != nil:
		return e.Auction.DateTime
	case e.Bid != nil:
		return e.Bid.DateTime
	}
	return 0
}

// MarshalJSON writes the event as one flat object: "type" ("person",
// "auction" or "bid") beside the fields of its kind.
func (e Event) MarshalJSON() ([]byte, error) {
	switch {
	case e.Person != nil:
		return json.Marshal(struct {
			Type string `json:"type"`
			*Person
		}{"person", e.Person})
	case e.Auction != nil:
		return json.Marshal(struct {
			Type string `json:"type"`
			*Auction
		}{"auction", e.Auction})
	case e.Bid != nil:
		return json.Marshal(struct {
			Type string `json:"type"`
			*Bid
		}{"bid", e.Bid})
	}
	return nil, errors.New("nexmark: an event of no kind")
}

// ErrCorrupt is returned by the codecs for an encoding they cannot
// decode.
var ErrCorrupt = errors.New("nexmark: corrupt encoding")

// enc and dec are the binary encoding of the codecs: varints and
// length-prefixed strings, in field order.
type dec struct {
	b   []byte
	err error
}

func (d *dec) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = ErrCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) str() string {
	n := d.int()
	if d.err != nil {
		return ""
	}
	if n < 0 || n > int64(len(d.b)) {
		d.err = ErrCorrupt
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// done reports the decoding's error, or ErrCorrupt if bytes are left.
func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		return ErrCorrupt
	}
	return d.err
}

func appendStr(dst []byte, s string) []byte {
	return append(binary.AppendVarint(dst, int64(len(s))), s...)
}

func appendPerson(dst []byte, p *Person) []byte {
	dst = binary.AppendVarint(dst, p.ID)
	dst = appendStr(dst, p.Name)
	dst = appendStr(dst, p.EmailAddress)
	dst = appendStr(dst, p.CreditCard)
	dst = appendStr(dst, p.City)
	dst = appendStr(dst, p.State)
	dst = binary.AppendVarint(dst, p.DateTime)
	return appendStr(dst, p.Extra)
}

func decodePerson(d *dec) *Person {
	return &Person{ID: d.int(), Name: d.str(), EmailAddress: d.str(), CreditCard: d.str(),
		City: d.str(), State: d.str(), DateTime: d.int(), Extra: d.str()}
}

func appendAuction(dst []byte, a *Auction) []byte {
	dst = binary.AppendVarint(dst, a.ID)
	dst = appendStr(dst, a.ItemName)
	dst = appendStr(dst, a.Description)
	dst = binary.AppendVarint(dst, a.InitialBid)
	dst = binary.AppendVarint(dst, a.Reserve)
	dst = binary.AppendVarint(dst, a.DateTime)
	dst = binary.AppendVarint(dst, a.Expires)
	dst = binary.AppendVarint(dst, a.Seller)
	dst = binary.AppendVarint(dst, a.Category)
	return appendStr(dst, a.Extra)
}

func decodeAuction(d *dec) *Auction {
	return &Auction{ID: d.int(), ItemName: d.str(), Description: d.str(), InitialBid: d.int(), Reserve: d.int(),
		DateTime: d.int(), Expires: d.int(), Seller: d.int(), Category: d.int(), Extra: d.str()}
}

func appendBid(dst []byte, b *Bid) []byte {
	dst = binary.AppendVarint(dst, b.Auction)
	dst = binary.AppendVarint(dst, b.Bidder)
	dst = binary.AppendVarint(dst, b.Price)
	dst = appendStr(dst, b.Channel)
	dst = appendStr(dst, b.URL)
	dst = binary.AppendVarint(dst, b.DateTime)
	return appendStr(dst, b.Extra)
}

func decodeBid(d *dec) *Bid {
	return &Bid{Auction: d.int(), Bidder: d.int(), Price: d.int(), Channel: d.str(), URL: d.str(),
		DateTime: d.int(), Extra: d.str()}
}

// EventCodec serializes events (a codec.Codec[Event]): a kind byte, then
// the fields.
type EventCodec struct{}

// Append implements codec.Codec.
func (EventCodec) Append(dst []byte, e Event) []byte {
	switch {
	case e.Person != nil:
		return appendPerson(append(dst, byte(KindPerson)), e.Person)
	case e.Auction != nil:
		return appendAuction(append(dst, byte(KindAuction)), e.Auction)
	case e.Bid != nil:
		return appendBid(append(dst, byte(KindBid)), e.Bid)
	}
	panic("nexmark: encoding an event of no kind")
}

// Decode implements codec.Codec.
func (EventCodec) Decode(src []byte) (Event, error) {
	if len(src) == 0 {
		return Event{}, ErrCorrupt
	}
	d := &dec{b: src[1:]}
	var e Event
	switch Kind(src[0]) {
	case KindPerson:
		e.Person = decodePerson(d)
	case KindAuction:
		e.Auction = decodeAuction(d)
	case KindBid:
		e.Bid = decodeBid(d)
	default:
		return Event{}, fmt.Errorf("%w: event kind %d", ErrCorrupt, src[0])
	}
	if err := d.done(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// PersonCodec serializes persons (a codec.Codec[Person]).
type PersonCodec struct{}

// Append implements codec.Codec.
func (PersonCodec) Append(dst []byte, p Person) []byte { return appendPerson(dst, &p) }

// Decode implements codec.Codec.
func (PersonCodec) Decode(src []byte) (Person, error) {
	d := &dec{b: src}
	p := decodePerson(d)
	return *p, d.done()
}

// AuctionCodec serializes auctions (a codec.Codec[Auction]).
type AuctionCodec struct{}

// Append implements codec.Codec.
func (AuctionCodec) Append(dst []byte, a Auction) []byte { return appendAuction(dst, &a) }

// Decode implements codec.Codec.
func (AuctionCodec) Decode(src []byte) (Auction, error) {
	d := &dec{b: src}
	a := decodeAuction(d)
	return *a, d.done()
}

// BidCodec serializes bids (a codec.Codec[Bid]).
type BidCodec struct{}

// Append implements codec.Codec.
func (BidCodec) Append(dst []byte, b Bid) []byte { return appendBid(dst, &b) }

// Decode implements codec.Codec.
func (BidCodec) Decode(src []byte) (Bid, error) {
	d := &dec{b: src}
	b := decodeBid(d)
	return *b, d.done()
}
