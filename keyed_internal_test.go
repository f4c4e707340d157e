package weir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/eventtime/window"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/task"
)

// groupProbe records what a keyed head hands on.
type groupProbe struct {
	v, ts int64
	g     int
}

func (p *groupProbe) collect(v, ts int64) error { return errors.New("collect without the key group") }
func (p *groupProbe) collectInGroup(v, ts int64, g int) error {
	p.v, p.ts, p.g = v, ts, g
	return nil
}

// A keyed head hands the key group and timestamp in front of a record to
// the keyed operator, and rejects records too short for them or with a
// key group the job cannot have.
func TestKeyedHeadDecodesKeyGroup(t *testing.T) {
	p := &groupProbe{}
	all := keygroup.Range{Start: 0, End: 299} // max parallelism 300, one subtask
	stamped := newKeyedHead[int64](codec.Int64(), true, p, p, all)
	rec := []byte{0x01, 0x2b} // key group 299
	rec = append(rec, 0, 0, 0, 0, 0, 0, 0x03, 0xe8)
	rec = codec.Int64().Append(rec, -7)
	require.NoError(t, stamped.ProcessRecord(rec))
	require.Equal(t, groupProbe{v: -7, ts: 1000, g: 299}, *p)

	plain := newKeyedHead[int64](codec.Int64(), false, p, p, all)
	require.NoError(t, plain.ProcessRecord(codec.Int64().Append([]byte{0, 5}, 42)))
	require.Equal(t, groupProbe{v: 42, ts: eventtime.NoTimestamp, g: 5}, *p)

	for name, c := range map[string]struct {
		h   *keyedHead[int64]
		rec []byte
		err string
	}{
		"empty":            {plain, nil, "no key group before it"},
		"one byte":         {plain, []byte{0}, "no key group before it"},
		"group too large":  {plain, codec.Int64().Append([]byte{0x01, 0x2c}, 1), "key group 300 outside this subtask's key groups [0,299]"},
		"no timestamp":     {stamped, []byte{0, 1, 0, 0}, "too short for its timestamp"},
		"value truncated":  {stamped, []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "decoding record"},
		"value truncated2": {plain, []byte{0, 1, 9}, "decoding record"},
	} {
		require.ErrorContains(t, c.h.ProcessRecord(c.rec), c.err, name)
	}
}

// A record whose key group belongs to another subtask (a foreign group
// from the wire: a producer's bug or corrupt input) fails the keyed
// operator's task with a *state.KeyGroupError where the group enters, in
// the keyed head; the backend below it never sees the group, and would
// refuse it with the same error rather than panic.
func TestForeignKeyGroupFailsWithError(t *testing.T) {
	const maxPar = 128
	rng := keygroup.RangeFor(maxPar, 2, 0) // subtask 0 of 2: groups 0..63
	be, err := heap.New(heap.Config{MaxParallelism: maxPar, Parallelism: 2, Index: 0})
	require.NoError(t, err)
	defer be.Close()
	kc := &keyContext[benchKV, int64]{fn: func(x benchKV) int64 { return x.K }, kc: codec.Int64(), hash: codec.HashFunc(codec.Int64()), maxPar: maxPar}
	op := &reduceOp[benchKV, int64]{opBase: opBase{name: "reduce", keyed: true, run: &task.CurrentOperator{}},
		kc: kc, fn: func(a, b benchKV) benchKV { return benchKV{a.K, a.V + b.V} }, next: discard[benchKV]{}, codec: benchKVCodec}
	require.NoError(t, op.Open(&task.OperatorContext{Keyed: be}))
	head := newKeyedHead[benchKV](benchKVCodec, true, op, op, rng)

	rec := func(g int) []byte {
		r := []byte{byte(g >> 8), byte(g)}
		r = append(r, 0, 0, 0, 0, 0, 0, 0, 1)
		return benchKVCodec.Append(r, benchKV{K: 1, V: 1})
	}
	require.NoError(t, head.ProcessRecord(rec(63)))
	for _, g := range []int{64, 100, 127, 128, 0xffff} {
		var kge *state.KeyGroupError
		err := head.ProcessRecord(rec(g))
		require.ErrorAs(t, err, &kge, "group %d", g)
		require.Equal(t, g, kge.Group)
		require.Equal(t, rng, kge.Range)
	}
	// Past the head, as in a chain fed without one: the operator's
	// backend refuses the group with the same error.
	var kge *state.KeyGroupError
	require.ErrorAs(t, op.collectInGroup(benchKV{K: 1, V: 1}, 0, 100), &kge)
	require.Equal(t, 100, kge.Group)
}

type benchKV struct{ K, V int64 }

var benchKVCodec = codec.Struct2(codec.Int64(), func(x benchKV) int64 { return x.K },
	codec.Int64(), func(x benchKV) int64 { return x.V },
	func(k, v int64) benchKV { return benchKV{k, v} })

// benchRecord returns the serialized record of (k, v) at timestamp ts,
// preceded by k's key group if grouped.
func benchRecord(k, v, ts int64, grouped bool, maxPar int) []byte {
	var rec []byte
	if grouped {
		g := keygroup.ForHash(codec.Int64().Hash(k), maxPar)
		rec = append(rec, byte(g>>8), byte(g))
	}
	rec = binary.BigEndian.AppendUint64(rec, uint64(ts))
	return benchKVCodec.Append(rec, benchKV{k, v})
}

// benchHead returns the chain head of a keyed operator op: the keyed
// head if grouped.
func benchHead[O interface {
	collector[benchKV]
	groupCollector[benchKV]
}](op O, grouped bool, maxPar int) task.RecordProcessor {
	if grouped {
		return newKeyedHead[benchKV](benchKVCodec, true, op, op, keygroup.Range{Start: 0, End: maxPar - 1})
	}
	return &stampedHead[benchKV]{c: benchKVCodec, next: op}
}

// BenchmarkKeyedTaskPath is the keyed sum's consumer task without its
// goroutines: serialized timestamped records (1,024 keys) through the
// chain head into a keyed reduce on the heap backend, one goroutine, no
// exchange. grouped=true reads the records of a keyed edge to several
// subtasks, whose key group the producer wrote before them; grouped=false
// hashes each key here (one consumer). ns/op is the task's CPU per record,
// free of the scheduling noise of the job benchmarks.
func BenchmarkKeyedTaskPath(b *testing.B) {
	const keys, maxPar = 1024, 128
	hash := codec.HashFunc(codec.Int64())
	for _, grouped := range []bool{false, true} {
		b.Run(fmt.Sprintf("grouped=%v", grouped), func(b *testing.B) {
			be, err := heap.New(heap.Config{MaxParallelism: maxPar})
			require.NoError(b, err)
			defer be.Close()
			kc := &keyContext[benchKV, int64]{fn: func(x benchKV) int64 { return x.K }, kc: codec.Int64(), hash: hash, maxPar: maxPar}
			op := &reduceOp[benchKV, int64]{opBase: opBase{name: "reduce", keyed: true, run: &task.CurrentOperator{}},
				kc: kc, fn: func(a, b benchKV) benchKV { return benchKV{a.K, a.V + b.V} }, next: discard[benchKV]{}, codec: benchKVCodec}
			require.NoError(b, op.Open(&task.OperatorContext{Keyed: be}))
			recs := make([][]byte, keys)
			for k := range recs {
				recs[k] = benchRecord(int64(k), 1, int64(k), grouped, maxPar)
			}
			head := benchHead(op, grouped, maxPar)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := head.ProcessRecord(recs[i&(keys-1)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkWindowTaskPath is BenchmarkWindowTumbling's window task without
// its goroutines: serialized timestamped records (1,000 keys, a
// millisecond of event time per 1,000 records) through the chain head into
// a 1 s tumbling window sum on the heap backend, with a watermark every
// 1,000 records firing what closed; grouped as in BenchmarkKeyedTaskPath.
func BenchmarkWindowTaskPath(b *testing.B) {
	const keys, maxPar, batch = 1000, 128, 1 << 16
	hash := codec.HashFunc(codec.Int64())
	for _, grouped := range []bool{false, true} {
		b.Run(fmt.Sprintf("grouped=%v", grouped), func(b *testing.B) {
			be, err := heap.New(heap.Config{MaxParallelism: maxPar})
			require.NoError(b, err)
			defer be.Close()
			fired := 0
			op := &windowOperator[benchKV, int64, benchKV, benchKV]{
				opBase: opBase{name: "window", keyed: true, run: &task.CurrentOperator{}},
				cfg:    window.Config{Assigner: window.TumblingWindows(1000, 0), Name: "window"},
				fn:     window.Reduce(benchKVCodec, func(a, x benchKV) benchKV { return benchKV{a.K, a.V + x.V} }),
				next:   collectorFunc[benchKV](func(benchKV, int64) error { fired++; return nil }),
				result: func(_ []byte, _ window.Window, v benchKV) (benchKV, error) { return v, nil },
				key:    func(x benchKV) int64 { return x.K }, kc: codec.Int64(), hash: hash, maxPar: maxPar,
			}
			require.NoError(b, op.Open(&task.OperatorContext{Keyed: be}))
			// Records i and i+batch differ by their timestamps only: the
			// batch is rewritten in place as time goes on.
			recs := make([][]byte, batch)
			for i := range recs {
				recs[i] = benchRecord(int64(i%keys), 1, 0, grouped, maxPar)
			}
			tsAt := 0
			if grouped {
				tsAt = 2
			}
			head := benchHead(op, grouped, maxPar)
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				rec := recs[i&(batch-1)]
				ts := i / 1000
				binary.BigEndian.PutUint64(rec[tsAt:], uint64(ts))
				if err := head.ProcessRecord(rec); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 999 {
					if _, err := op.ProcessWatermark(ts - 1); err != nil {
						b.Fatal(err)
					}
				}
				i++
			}
			if i >= 2_000_000 && fired == 0 {
				b.Fatal("no window fired")
			}
		})
	}
}

// collectorFunc is a collector calling a function.
type collectorFunc[T any] func(v T, ts int64) error

func (f collectorFunc[T]) collect(v T, ts int64) error { return f(v, ts) }
