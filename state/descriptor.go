package state

import "github.com/weirstream/weir/codec"

// ValueDescriptor names a keyed value state.
type ValueDescriptor[T any] struct {
	Name    string
	Codec   codec.Codec[T]
	Default T // returned by Value for a key without a value
	TTL     TTL
}

// ListDescriptor names a list state (keyed, or operator state).
type ListDescriptor[T any] struct {
	Name  string
	Codec codec.Codec[T]
	// TTL of each element (keyed list states only).
	TTL TTL
}

// MapDescriptor names a keyed map state.
type MapDescriptor[K, V any] struct {
	Name       string
	KeyCodec   codec.Codec[K]
	ValueCodec codec.Codec[V]
	TTL        TTL // of each entry
}

// ReducingDescriptor names a keyed reducing state: each added value is
// folded into the stored one with Reduce.
type ReducingDescriptor[T any] struct {
	Name   string
	Codec  codec.Codec[T]
	Reduce func(acc, v T) T
	TTL    TTL
}

// AggregatingDescriptor names a keyed aggregating state: inputs are added to
// an accumulator (created by NewAcc, stored with AccCodec), and Result turns
// the accumulator into the output.
type AggregatingDescriptor[IN, ACC, OUT any] struct {
	Name     string
	AccCodec codec.Codec[ACC]
	NewAcc   func() ACC
	Add      func(acc ACC, in IN) ACC
	Result   func(acc ACC) OUT
	TTL      TTL
}
