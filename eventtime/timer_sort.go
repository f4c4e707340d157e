package eventtime

import "slices"

// timerRadixMin is the number of entries from which a bucket is sorted by
// radix rather than by comparisons.
const timerRadixMin = 256

// timerSortKey is an entry's key prefix with its position, what the radix
// passes move.
type timerSortKey struct {
	hi, lo uint64
	i      int32
}

// timerSorter sorts the entries of one bucket by key, then namespace
// (timerCompare). A large bucket (every key's timer of one window end) is
// sorted by a least-significant-digit radix sort of the 16-byte key
// prefixes, skipping the byte positions where all prefixes agree (most:
// keys share their first bytes or are shorter than 16), then runs of
// equal prefixes by comparison. Its buffers are reused.
type timerSorter struct {
	keys, tmp []timerSortKey
	out       []timerEntry
}

func (s *timerSorter) sort(e []timerEntry) {
	if len(e) < timerRadixMin {
		slices.SortFunc(e, func(x, y timerEntry) int { return timerCompare(&x, &y) })
		return
	}
	n := len(e)
	s.keys = slices.Grow(s.keys[:0], n)[:n]
	s.tmp = slices.Grow(s.tmp[:0], n)[:n]
	// One histogram per byte position (0 = the least significant).
	var counts [16][256]int32
	for i := range e {
		p := e[i].prefix
		s.keys[i] = timerSortKey{p.hi, p.lo, int32(i)}
		for d := range 8 {
			counts[d][byte(p.lo>>(8*d))]++
			counts[8+d][byte(p.hi>>(8*d))]++
		}
	}
	src, dst := s.keys, s.tmp
	for d := range 16 {
		shift := uint(8 * (d % 8))
		word := func(k *timerSortKey) uint64 { return k.lo }
		if d >= 8 {
			word = func(k *timerSortKey) uint64 { return k.hi }
		}
		c := &counts[d]
		if c[byte(word(&src[0])>>shift)] == int32(n) {
			continue // every prefix has the same byte here
		}
		var pos [256]int32
		sum := int32(0)
		for b := range 256 {
			pos[b] = sum
			sum += c[b]
		}
		if d < 8 {
			for i := range src {
				b := byte(src[i].lo >> shift)
				dst[pos[b]] = src[i]
				pos[b]++
			}
		} else {
			for i := range src {
				b := byte(src[i].hi >> shift)
				dst[pos[b]] = src[i]
				pos[b]++
			}
		}
		src, dst = dst, src
	}
	s.out = slices.Grow(s.out[:0], n)[:n]
	for j := range src {
		s.out[j] = e[src[j].i]
	}
	copy(e, s.out)
	clear(s.out)
	// Equal prefixes: by the whole key, then the namespace.
	for i := 0; i < n; {
		j := i + 1
		for j < n && e[j].prefix == e[i].prefix {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(e[i:j], func(x, y timerEntry) int { return timerCompare(&x, &y) })
		}
		i = j
	}
}
