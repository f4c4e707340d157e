// Package keygroup maps keys to key groups and key groups to parallel
// subtasks, the way Flink does: a key's group never changes for a given max
// parallelism, so state can be redistributed on rescaling by whole groups.
package keygroup

import "fmt"

// DefaultMaxParallelism is the number of key groups when none is configured.
const DefaultMaxParallelism = 128

// MaxMaxParallelism is the largest allowed max parallelism (Flink: 2^15).
const MaxMaxParallelism = 1 << 15

// Range is the inclusive range [Start, End] of key groups one subtask owns.
// An empty range has End < Start.
type Range struct {
	Start, End int
}

// Len is the number of key groups in r.
func (r Range) Len() int {
	if r.End < r.Start {
		return 0
	}
	return r.End - r.Start + 1
}

// Contains reports whether g lies in r.
func (r Range) Contains(g int) bool { return g >= r.Start && g <= r.End }

func (r Range) String() string { return fmt.Sprintf("[%d,%d]", r.Start, r.End) }

// Mix scrambles a key hash so that structured hashes (small integers,
// sequential ids) spread evenly over key groups (the 64-bit finalizer of
// MurmurHash3).
func Mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// ForHash returns the key group of a key whose hash is h.
func ForHash(h uint64, maxParallelism int) int {
	m := uint64(maxParallelism)
	if m&(m-1) == 0 {
		// A power of two (the default 128): the same remainder, without a
		// 64-bit division, which costs more than the rest of the key path.
		return int(Mix(h) & (m - 1))
	}
	return int(Mix(h) % m)
}

// Operator returns the subtask index (0..parallelism-1) that owns key group g.
func Operator(g, maxParallelism, parallelism int) int {
	return g * parallelism / maxParallelism
}

// RangeFor returns the key groups owned by subtask index of parallelism.
func RangeFor(maxParallelism, parallelism, index int) Range {
	start := (index*maxParallelism + parallelism - 1) / parallelism
	end := ((index+1)*maxParallelism+parallelism-1)/parallelism - 1
	return Range{Start: start, End: end}
}

// Validate checks a (max parallelism, parallelism) pair.
func Validate(maxParallelism, parallelism int) error {
	if maxParallelism < 1 || maxParallelism > MaxMaxParallelism {
		return fmt.Errorf("keygroup: max parallelism %d out of range [1, %d]", maxParallelism, MaxMaxParallelism)
	}
	if parallelism < 1 || parallelism > maxParallelism {
		return fmt.Errorf("keygroup: parallelism %d out of range [1, max parallelism %d]", parallelism, maxParallelism)
	}
	return nil
}
