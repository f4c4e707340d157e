package queries

import (
	"encoding/binary"

	"github.com/weirstream/weir/codec"
)

// intsAndString is the codec of a row of n integers and a string: the
// integers as varints, the string's length, then its bytes.
func intsAndString[R any](n int, split func(R, []int64) string, build func([]int64, string) R) codec.Codec[R] {
	return codec.Func(func(dst []byte, r R) []byte {
		var buf [8]int64
		vs := buf[:n]
		s := split(r, vs)
		for _, v := range vs {
			dst = binary.AppendVarint(dst, v)
		}
		return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
	}, func(src []byte) (R, error) {
		var zero R
		var buf [8]int64
		vs := buf[:n]
		for i := range vs {
			v, k := binary.Varint(src)
			if k <= 0 {
				return zero, errCorrupt
			}
			vs[i], src = v, src[k:]
		}
		l, k := binary.Uvarint(src)
		if k <= 0 || l != uint64(len(src)-k) {
			return zero, errCorrupt
		}
		return build(vs, string(src[k:])), nil
	})
}

var q0RowCodec = intsAndString(4, func(r Q0Row, v []int64) string {
	v[0], v[1], v[2], v[3] = r.Auction, r.Bidder, r.Price, r.DateTime
	return r.Extra
}, func(v []int64, s string) Q0Row { return Q0Row{v[0], v[1], v[2], v[3], s} })

var q1RowCodec = intsAndString(4, func(r Q1Row, v []int64) string {
	v[0], v[1], v[2], v[3] = r.Auction, r.Bidder, int64(r.Price), r.DateTime
	return r.Extra
}, func(v []int64, s string) Q1Row { return Q1Row{v[0], v[1], Euros(v[2]), v[3], s} })

var q7RowCodec = intsAndString(6, func(r Q7Row, v []int64) string {
	v[0], v[1], v[2], v[3], v[4], v[5] = r.Auction, r.Price, r.Bidder, r.DateTime, r.StartTime, r.EndTime
	return r.Extra
}, func(v []int64, s string) Q7Row { return Q7Row{v[0], v[1], v[2], v[3], s, v[4], v[5]} })

var q7BidCodec = intsAndString(4, func(b q7Bid, v []int64) string {
	v[0], v[1], v[2], v[3] = b.Auction, b.Price, b.Bidder, b.DateTime
	return b.Extra
}, func(v []int64, s string) q7Bid { return q7Bid{v[0], v[1], v[2], v[3], s} })
