package pebble

import (
	"cmp"
	"encoding/binary"
	"slices"
)

// sortKey is an item (a cache slot, a prefetch's key) with the first 16
// bytes of its key, big-endian and zero-padded: comparing them orders keys
// as their bytes do, except that equal prefixes need the keys compared.
type sortKey struct {
	hi, lo uint64
	slot   int32
}

func newSortKey[K string | []byte](key K, slot int32) sortKey {
	var p [16]byte
	copy(p[:], key)
	return sortKey{binary.BigEndian.Uint64(p[:8]), binary.BigEndian.Uint64(p[8:]), slot}
}

// radixMin is the number of items from which sortKeys radix-sorts.
const radixMin = 64

// sortKeys sorts ks by their prefixes, and items with equal prefixes by
// tie (which compares the whole keys of two items), with tmp as scratch;
// it returns tmp, grown, for the next call.
//
// It is a least-significant-byte-first radix sort over the prefix bytes
// that differ between the items: the keys of one backend share their
// state's bytes and often their key group's high byte and their framing,
// so a few passes of one read and one write per item sort them. A
// comparison sort of the prefixes (slices.SortFunc, log₂ n comparisons
// an item through a function value) took a sixth of a task's time in a
// job whose state is a hundred times its cache (BenchmarkJobLargeState):
// every record's write-back and prefetch sort their keys.
func sortKeys(ks, tmp []sortKey, tie func(a, b int32) int) []sortKey {
	n := len(ks)
	if n < radixMin {
		slices.SortFunc(ks, func(a, b sortKey) int {
			if c := cmpPrefix(a, b); c != 0 {
				return c
			}
			return tie(a.slot, b.slot)
		})
		return tmp
	}
	var cnt [16][256]int32
	for _, k := range ks {
		for b := range 8 {
			cnt[b][byte(k.hi>>(56-8*b))]++
			cnt[8+b][byte(k.lo>>(56-8*b))]++
		}
	}
	tmp = slices.Grow(tmp[:0], n)[:n]
	src, dst := ks, tmp
	for pos := 15; pos >= 0; pos-- {
		c := &cnt[pos]
		if c[prefixByte(src[0], pos)] == int32(n) {
			continue // every item has this byte
		}
		var sum int32
		for i, v := range c {
			c[i], sum = sum, sum+v
		}
		for _, k := range src {
			d := prefixByte(k, pos)
			dst[c[d]] = k
			c[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &ks[0] {
		copy(ks, src)
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && ks[j].hi == ks[i].hi && ks[j].lo == ks[i].lo {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(ks[i:j], func(a, b sortKey) int { return tie(a.slot, b.slot) })
		}
		i = j
	}
	return tmp
}

func prefixByte(k sortKey, pos int) byte {
	if pos < 8 {
		return byte(k.hi >> (56 - 8*pos))
	}
	return byte(k.lo >> (56 - 8*(pos-8)))
}

func cmpPrefix(a, b sortKey) int {
	if a.hi != b.hi {
		return cmp.Compare(a.hi, b.hi)
	}
	return cmp.Compare(a.lo, b.lo)
}
