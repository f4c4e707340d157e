package queries

import (
	"reflect"
	"testing"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
)

// roundTrip checks that c decodes what it encodes, and that no
// truncation of an encoding decodes to the same value without an error.
func roundTrip[T any](t *testing.T, name string, c codec.Codec[T], vs ...T) {
	t.Helper()
	for _, v := range vs {
		b := c.Append(nil, v)
		got, err := c.Decode(b)
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("%s: %+v decoded as %+v, %v", name, v, got, err)
		}
		for k := range len(b) {
			if got, err := c.Decode(b[:k]); err == nil && reflect.DeepEqual(got, v) {
				t.Fatalf("%s: %+v truncated to %d bytes decoded without error", name, v, k)
			}
		}
	}
}

func TestCodecs(t *testing.T) {
	g, err := nexmark.New(nexmark.Config{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, b := *g.Event(1).Auction, *g.Event(7).Bid
	roundTrip(t, "q0", q0RowCodec, Q0Row{1, 2, 3, 4, "x"}, Q0Row{-1, 0, 1 << 40, 5, ""})
	roundTrip(t, "q1", q1RowCodec, Q1Row{1, 2, 908, 4, "extra"})
	roundTrip(t, "q7 row", q7RowCodec, Q7Row{1, 2, 3, 4, "e", 5, 6})
	roundTrip(t, "q7 top", q7TopCodec, top[q7Bid]{10, []q7Bid{{1, 10, 3, 4, "a"}, {2, 10, 5, 6, ""}}})
	roundTrip(t, "q3 in", q3InCodec, q3In{Auction: q3Auction{1, 2}}, q3In{Person: q3Person{1, "n", "c", "s"}, IsPerson: true})
	roundTrip(t, "q8 in", q8InCodec, q8In{Seller: 1001}, q8In{Person: q8Person{1, "n", 5}, IsPerson: true})
	roundTrip(t, "q9 in", wInCodec[nexmark.Auction, nexmark.Bid](nexmark.AuctionCodec{}, nexmark.BidCodec{}),
		wIn[nexmark.Auction, nexmark.Bid]{A: a}, wIn[nexmark.Auction, nexmark.Bid]{B: b, IsBid: true})
	roundTrip(t, "q9 row", q9RowCodec, NewQ9Row(a, b))
	if _, err := q9RowCodec.Decode([]byte{200}); err == nil {
		t.Fatal("a bad q9 row decoded")
	}
}

func TestEurosJSON(t *testing.T) {
	for v, want := range map[Euros]string{908: "0.908", 90800: "90.800", 1234567: "1234.567", -5: "-0.005"} {
		b, err := v.MarshalJSON()
		if err != nil || string(b) != want {
			t.Errorf("%d: %s, %v; want %s", v, b, err, want)
		}
		var back Euros
		if err := back.UnmarshalJSON(b); err != nil || back != v {
			t.Errorf("%s read back as %d, %v", b, back, err)
		}
	}
}
