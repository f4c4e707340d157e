package codec

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// Hash64 returns the 64-bit FNV-1a hash of b. The runtime hashes encoded
// keys with it to assign them to key groups, so its output is part of the
// checkpoint format and never changes. It does not allocate.
func Hash64(b []byte) uint64 {
	h := uint64(fnvOffset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// Hasher is implemented by codecs that compute Hash64 of a value's
// encoding without encoding it: Hash(v) == Hash64(Append(nil, v)).
type Hasher[T any] interface {
	Hash(v T) uint64
}

// HashFunc returns a function returning Hash64 of v's encoding with c: c's
// Hash when c is a Hasher, else one that encodes v into its own scratch
// buffer (so each call of HashFunc returns a function for one goroutine).
func HashFunc[T any](c Codec[T]) func(T) uint64 {
	if h, ok := c.(Hasher[T]); ok {
		return h.Hash
	}
	var buf []byte
	return func(v T) uint64 {
		buf = c.Append(buf[:0], v)
		return Hash64(buf)
	}
}

// hash64BE returns Hash64 of the n low bytes of v in big-endian order,
// unrolled.
func hash64BE(v uint64, n int) uint64 {
	h := uint64(fnvOffset64)
	for i := n - 1; i >= 0; i-- {
		h ^= (v >> (8 * i)) & 0xff
		h *= fnvPrime64
	}
	return h
}

// hashUint64 is hash64BE(v, 8), written out.
func hashUint64(v uint64) uint64 {
	h := uint64(fnvOffset64)
	h = (h ^ (v >> 56)) * fnvPrime64
	h = (h ^ (v >> 48 & 0xff)) * fnvPrime64
	h = (h ^ (v >> 40 & 0xff)) * fnvPrime64
	h = (h ^ (v >> 32 & 0xff)) * fnvPrime64
	h = (h ^ (v >> 24 & 0xff)) * fnvPrime64
	h = (h ^ (v >> 16 & 0xff)) * fnvPrime64
	h = (h ^ (v >> 8 & 0xff)) * fnvPrime64
	return (h ^ (v & 0xff)) * fnvPrime64
}

// Hash returns Hash64 of v's encoding without encoding it.
func (Int64Codec) Hash(v int64) uint64 { return hashUint64(uint64(v)) }

// Hash returns Hash64 of v's encoding without encoding it.
func (IntCodec) Hash(v int) uint64 { return hashUint64(uint64(int64(v))) }

// Hash returns Hash64 of v's encoding without encoding it.
func (Uint64Codec) Hash(v uint64) uint64 { return hashUint64(v) }

// Hash returns Hash64 of v's encoding without encoding it.
func (Int32Codec) Hash(v int32) uint64 { return hash64BE(uint64(uint32(v)), 4) }

// Hash returns Hash64 of v's encoding without encoding it.
func (Uint32Codec) Hash(v uint32) uint64 { return hash64BE(uint64(v), 4) }

// Hash returns Hash64 of v's encoding without encoding it.
func (StringCodec) Hash(v string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(v); i++ {
		h ^= uint64(v[i])
		h *= fnvPrime64
	}
	return h
}
