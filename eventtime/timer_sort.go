package eventtime

import (
	"cmp"
	"math/bits"
	"slices"
)

// timerRadixMin is the number of entries from which they are sorted by
// radix rather than by comparisons.
const timerRadixMin = 256

// timerDigitBits is the most bits a radix pass over packed keys sorts by:
// its histogram (8 KiB) stays in the L1 cache.
const timerDigitBits = 11

// timerSortKey is what the radix passes move: an entry's timestamp (sign
// bit flipped, so that it orders unsigned) and key prefix, with the
// entry's position.
type timerSortKey struct {
	w [3]uint64 // timestamp, prefix.hi, prefix.lo
	i int32
}

// timerSorter sorts queue entries like timerCompare. Many entries (the
// pending timers of a queue) are sorted by least-significant-digit radix
// passes that skip what all the entries share, then runs of equal
// timestamps and prefixes by comparison. When the timestamps' offsets
// from the least, the spans of prefix bits that differ and an entry's
// position fit in 64 bits (every key's timer of a window end or two, or a
// backlog of a million timestamps over ten thousand numbered keys), the
// passes move packed uint64s, up to timerDigitBits bits a pass;
// otherwise 32-byte keys, by timestamp, then each large group of one
// timestamp by prefix, a pass per byte that differs. Its buffers are
// reused.
type timerSorter struct {
	packed, ptmp []uint64
	counts       *[(64 + timerDigitBits - 1) / timerDigitBits][1 << timerDigitBits]int32 // 48 KiB: allocated by the first radix sort
	keys, tmp    []timerSortKey
	out          []timerEntry
}

// sort returns e sorted: e itself, or a buffer of the sorter's (then e,
// cleared, becomes that buffer).
func (s *timerSorter) sort(e []timerEntry) []timerEntry {
	n := len(e)
	if n < timerRadixMin {
		slices.SortFunc(e, func(x, y timerEntry) int { return timerCompare(&x, &y) })
		return e
	}
	out := slices.Grow(s.out[:0], n)[:n]
	ok, ties := s.sortPacked(e, out)
	if !ok {
		ties = s.sortWords(e, out)
	}
	clear(e)
	s.out = e[:0]
	if !ties {
		return out
	}
	// Equal timestamps and prefixes: by the whole key, then the namespace.
	for i := 0; i < n; {
		j := i + 1
		for j < n && out[j].ts == out[i].ts && out[j].prefix == out[i].prefix {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(out[i:j], func(x, y timerEntry) int { return timerCompare(&x, &y) })
		}
		i = j
	}
	return out
}

// timerSortWords returns an entry's timestamp (sign bit flipped, so that
// it orders unsigned) and key prefix, most significant first.
func timerSortWords(e *timerEntry) [3]uint64 {
	return [3]uint64{uint64(e.ts) ^ 1<<63, e.prefix.hi, e.prefix.lo}
}

// sortPacked writes e into out ordered by timestamp and key prefix if it
// can pack, per entry, the bits of those that differ between entries and
// the entry's position into a uint64, and reports whether it could and
// whether two entries have equal timestamps and prefixes. A timestamp
// contributes its offset from the least (shifted past the low bits that
// all share), each prefix word its span from the lowest to the highest
// bit that differs (the few digits that number keys), so that few radix
// passes of up to timerDigitBits bits sort the packed keys.
func (s *timerSorter) sortPacked(e, out []timerEntry) (ok, ties bool) {
	var diff [3]uint64
	w0 := timerSortWords(&e[0])
	minTs, maxTs := w0[0], w0[0]
	for i := range e {
		w := timerSortWords(&e[i])
		diff[0] |= w[0] ^ w0[0]
		diff[1] |= w[1] ^ w0[1]
		diff[2] |= w[2] ^ w0[2]
		minTs, maxTs = min(minTs, w[0]), max(maxTs, w[0])
	}
	var low, span [3]uint
	total := uint(0)
	for w, d := range diff {
		if d != 0 {
			low[w] = uint(bits.TrailingZeros64(d))
			span[w] = uint(bits.Len64(d)) - low[w]
			if w == 0 {
				// An offset spans fewer bits than the xor when the
				// timestamps cross a power of two.
				span[w] = uint(bits.Len64((maxTs - minTs) >> low[w]))
			}
			total += span[w]
		}
	}
	posBits := uint(bits.Len(uint(len(e) - 1)))
	if total+posBits > 64 {
		return false, false
	}
	keys := slices.Grow(s.packed[:0], len(e))[:len(e)]
	tmp := slices.Grow(s.ptmp[:0], len(e))[:len(e)]
	s.packed, s.ptmp = keys, tmp
	// Shifts past 63 give 0 in Go: a word without span contributes nothing.
	m0, m1, m2 := uint64(1)<<span[0]-1, uint64(1)<<span[1]-1, uint64(1)<<span[2]-1
	for i := range e {
		w := timerSortWords(&e[i])
		x := ((w[0] - minTs) >> low[0]) & m0
		x = x<<span[1] | (w[1]>>low[1])&m1
		x = x<<span[2] | (w[2]>>low[2])&m2
		keys[i] = x<<posBits | uint64(i)
	}
	passes := (total + timerDigitBits - 1) / timerDigitBits
	a, b := keys, tmp
	if passes > 0 {
		digit := (total + passes - 1) / passes
		mask := uint64(1)<<digit - 1
		// The histograms of all passes in one read of the keys.
		if s.counts == nil {
			s.counts = new([(64 + timerDigitBits - 1) / timerDigitBits][1 << timerDigitBits]int32)
		}
		counts := s.counts[:passes]
		clear(counts)
		for _, x := range a {
			x >>= posBits
			for p := range counts {
				counts[p][x&mask]++
				x >>= digit
			}
		}
		for p := range counts {
			shift := posBits + uint(p)*digit
			pos := &counts[p]
			sum := int32(0)
			for c := range pos[:mask+1] {
				pos[c], sum = sum, sum+pos[c]
			}
			for _, x := range a {
				c := (x >> shift) & mask
				b[pos[c]] = x
				pos[c]++
			}
			a, b = b, a
		}
	}
	mask := uint64(1)<<posBits - 1
	prev := a[0] &^ mask
	for j, x := range a {
		out[j] = e[x&mask]
		ties = ties || j > 0 && x&^mask == prev
		prev = x &^ mask
	}
	return true, ties
}

// sortWords writes e into out ordered by timestamp and key prefix: a
// radix sort by timestamp, then of each large group of one timestamp by
// prefix. It reports whether two entries have equal timestamps and
// prefixes.
func (s *timerSorter) sortWords(e, out []timerEntry) (ties bool) {
	n := len(e)
	keys := slices.Grow(s.keys[:0], n)[:n]
	tmp := slices.Grow(s.tmp[:0], n)[:n]
	s.keys, s.tmp = keys, tmp
	for i := range e {
		keys[i] = timerSortKey{timerSortWords(&e[i]), int32(i)}
	}
	timerRadix(keys, tmp, 0, 0)
	for i := 0; i < n; {
		j := i + 1
		for j < n && keys[j].w[0] == keys[i].w[0] {
			j++
		}
		switch {
		case j-i >= timerRadixMin:
			timerRadix(keys[i:j], tmp[i:j], 1, 2)
		case j-i > 1:
			slices.SortFunc(keys[i:j], func(x, y timerSortKey) int {
				if c := cmp.Compare(x.w[1], y.w[1]); c != 0 {
					return c
				}
				return cmp.Compare(x.w[2], y.w[2])
			})
		}
		i = j
	}
	for j := range keys {
		out[j] = e[keys[j].i]
		ties = ties || j > 0 && keys[j].w == keys[j-1].w
	}
	return ties
}

// timerRadix sorts src stably by its words first to last (the most
// significant first), a pass per byte position where the words differ,
// with tmp (as long as src) as scratch.
func timerRadix(src, tmp []timerSortKey, first, last int) {
	a, b := src, tmp
	for w := last; w >= first; w-- {
		var diff uint64
		x0 := a[0].w[w]
		for i := range a {
			diff |= a[i].w[w] ^ x0
		}
		for shift := uint(0); shift < 64; shift += 8 {
			if byte(diff>>shift) == 0 {
				continue // every word has the same byte here
			}
			var pos [256]int32
			for i := range a {
				pos[byte(a[i].w[w]>>shift)]++
			}
			sum := int32(0)
			for c := range pos {
				pos[c], sum = sum, sum+pos[c]
			}
			for i := range a {
				c := byte(a[i].w[w] >> shift)
				b[pos[c]] = a[i]
				pos[c]++
			}
			a, b = b, a
		}
	}
	if &a[0] != &src[0] {
		copy(src, a)
	}
}
