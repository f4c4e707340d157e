package network

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/internal/cputime"
	"github.com/weirstream/weir/network/wire"
)

var eop = wire.AppendEvent(nil, wire.Event{Kind: wire.EventEndOfPartition})

// exchange runs a producer goroutine writing n 16-byte records through a
// real partition, and consumes them through a local channel, an input gate
// and a deserializer on the calling goroutine: the records are
// BenchmarkIdealPipeline's.
func exchange(b *testing.B, n int) { exchangeWake(b, n, DefaultWakeBatch, 0) }

// exchangeWake is exchange with the partition's wake batch set to k and
// a consumer that spends work rounds of arithmetic on every record.
func exchangeWake(b *testing.B, n, k, work int) {
	g, err := buffer.NewGlobalPool(buffer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	pool, err := g.NewLocalPool(2, 2*1+8)
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewResultPartition(newID(), "bench", 1, pool)
	if err != nil {
		b.Fatal(err)
	}
	p.SetWakeBatch(k)
	gate := NewInputGate("bench", []InputChannel{NewLocalChannel("bench[0]", p.Subpartition(0))})
	if err := gate.Start(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.SetContext(ctx)
	done := make(chan error, 1)
	go func() {
		// The ideal pipeline's record: a key and a value derived from it.
		w, err := NewRecordWriter(p, WriterConfig[uint64]{Partitioning: Forward, Append: func(dst []byte, v uint64) []byte {
			return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(dst, v), 3*v)
		}})
		if err != nil {
			done <- err
			return
		}
		for i := 0; i < n; i++ {
			if err := w.Emit(uint64(i)); err != nil {
				done <- err
				return
			}
		}
		p.Finish(eop)
		p.ReleaseProducer()
		done <- nil
	}()
	got, sum := drainGateWork(b, gate, work)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	gate.Close()
	if got != uint64(n) || sum != uint64(n)*uint64(n-1)/2 {
		b.Fatalf("got %d records (sum %d), want %d", got, sum, n)
	}
	if g.InUse() != 0 {
		b.Fatalf("%d segments leaked", g.InUse())
	}
}

// BenchmarkExchangeInProcess: two goroutines, a forward exchange of
// 16-byte records through the real partition, gate and deserializer.
func BenchmarkExchangeInProcess(b *testing.B) {
	b.ReportAllocs()
	cpu := startCPU()
	exchange(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	cpu.report(b)
}

// BenchmarkExchangeWakeBatch is BenchmarkExchangeInProcess with the
// producer woken once k of its 10 buffers were recycled (SetWakeBatch; k=1:
// by every recycled buffer).
// With consumer=slow the consumer spends 8 rounds of a xorshift more per
// record and is the slower side: the producer finds its pool empty at
// every buffer. (With consumer=fast the producer is the slower side and
// waits for a buffer only when the consumer is descheduled.)
func BenchmarkExchangeWakeBatch(b *testing.B) {
	for _, c := range []struct {
		name string
		work int
	}{{"fast", 0}, {"slow", 8}} {
		for _, k := range []int{1, 4, 8} {
			b.Run(fmt.Sprintf("consumer=%s/k=%d", c.name, k), func(b *testing.B) {
				b.ReportAllocs()
				cpu := startCPU()
				exchangeWake(b, b.N, k, c.work)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				cpu.report(b)
			})
		}
	}
}

// cpuMeter measures the process's CPU time over a benchmark: on a machine
// shared with other work the wall time per operation varies with their
// load, the CPU time the benchmark spends much less (steadiest with
// -cpu 1, where the goroutines take turns on one thread).
type cpuMeter time.Duration

func startCPU() cpuMeter { return cpuMeter(cputime.Process()) }

// report adds the CPU time per operation (both goroutines', the runtime's
// included) as the metric cpu-ns/op.
func (m cpuMeter) report(b *testing.B) {
	if used := cputime.Process() - time.Duration(m); used > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// idealPoolSize is the number of buffers the ideal pipeline cycles
// through, about the exchange benchmark's pool (2 + 8).
const idealPoolSize = 8

// idealRecord is the size of the ideal pipeline's records: two big-endian
// uint64s, a key and a value derived from it.
const idealRecord = 16

// idealPipeline is the in-process exchange reduced to its physical work,
// the yardstick BenchmarkExchangeInProcess is measured against: a producer
// goroutine encodes n 16-byte records (u32 length + key + value) into
// 32 KiB buffers taken from a fixed pool and hands each full buffer to the
// calling goroutine over a channel; it decodes every record, checks its
// length, sums keys and values and recycles the buffer. A record never
// spans buffers, and nothing else is done: no locks but the channels', no
// reference counts, no events, no statistics.
func idealPipeline(b *testing.B, n int) {
	free := make(chan []byte, idealPoolSize)
	for range idealPoolSize {
		free <- make([]byte, buffer.DefaultSegmentSize)
	}
	full := make(chan []byte, idealPoolSize)
	go func() {
		defer close(full)
		for i := 0; i < n; {
			seg := <-free
			pos, c := encodeIdeal(seg, i, n-i)
			i += c
			full <- seg[:pos]
		}
	}()
	var got, sum uint64
	for data := range full {
		s, c, ok := decodeIdeal(data)
		if !ok {
			b.Fatalf("ideal pipeline: corrupt buffer after %d records", got+c)
		}
		sum, got = sum+s, got+c
		free <- data[:cap(data)]
	}
	if want := 2 * uint64(n) * uint64(n-1); got != uint64(n) || sum != want {
		b.Fatalf("ideal pipeline: got %d records (sum %d), want %d (sum %d)", got, sum, n, want)
	}
}

// idealWire is an ideal pipeline record's size on the wire.
const idealWire = lengthSize + idealRecord

// encodeIdeal encodes the ideal pipeline's records from, from+1, … into
// seg until it is full or max records are written, and returns the bytes
// used and the records written (the machine-limits suite's fill16; its
// decode16 is decodeIdeal). BenchmarkTCPRecordPipeline shares both.
func encodeIdeal(seg []byte, from, max int) (used, count int) {
	for count < max && len(seg)-used >= idealWire {
		rec := seg[used : used+idealWire]
		k := uint64(from + count)
		binary.BigEndian.PutUint32(rec, idealRecord)
		binary.BigEndian.PutUint64(rec[4:], k)
		binary.BigEndian.PutUint64(rec[12:], 3*k)
		used += idealWire
		count++
	}
	return used, count
}

// decodeIdeal decodes the ideal pipeline's records in data and returns
// the sum of their keys and values, their number, and false if a length
// prefix is wrong or bytes trail.
func decodeIdeal(data []byte) (sum, count uint64, ok bool) {
	for ; len(data) >= idealWire; data = data[idealWire:] {
		if binary.BigEndian.Uint32(data) != idealRecord {
			return sum, count, false
		}
		sum += binary.BigEndian.Uint64(data[4:]) + binary.BigEndian.Uint64(data[12:])
		count++
	}
	return sum, count, len(data) == 0
}

// BenchmarkIdealPipeline is the ceiling for BenchmarkExchangeInProcess on
// this machine: 16-byte records between two goroutines with nothing but
// encoding, one channel send per 32 KiB buffer, decoding and recycling.
// Compare the two in one run (make baseline); the machine is too noisy for
// figures taken at different times to be compared.
func BenchmarkIdealPipeline(b *testing.B) {
	b.ReportAllocs()
	cpu := startCPU()
	idealPipeline(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	cpu.report(b)
}

func benchSerialize(b *testing.B, recSize int) {
	g, _ := buffer.NewGlobalPool(buffer.Config{})
	pool, _ := g.NewLocalPool(2, 4)
	p, _ := NewResultPartition(newID(), "bench", 1, pool)
	rec := make([]byte, recSize)
	sub := p.Subpartition(0)
	b.ReportAllocs()
	b.SetBytes(int64(recSize + lengthSize))
	b.ResetTimer()
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		binary.BigEndian.PutUint64(rec, uint64(i))
		if err := p.Write(0, rec); err != nil {
			b.Fatal(err)
		}
		if i&31 == 0 {
			for r := sub.Poll(); r.Buffer != nil; r = sub.Poll() {
				r.Buffer.Release()
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	cpu.report(b)
	p.Release()
}

func BenchmarkSerialize16(b *testing.B)  { benchSerialize(b, 16) }
func BenchmarkSerialize100(b *testing.B) { benchSerialize(b, 100) }

// BenchmarkEmit16 is the producer's half of BenchmarkExchangeInProcess on
// one goroutine: RecordWriter.Emit with the same encoder, the buffers
// released as they fill.
func BenchmarkEmit16(b *testing.B) {
	g, _ := buffer.NewGlobalPool(buffer.Config{})
	pool, _ := g.NewLocalPool(2, 4)
	p, _ := NewResultPartition(newID(), "bench", 1, pool)
	pad := make([]byte, 8)
	w, err := NewRecordWriter(p, WriterConfig[uint64]{Partitioning: Forward, Append: func(dst []byte, v uint64) []byte {
		return append(binary.BigEndian.AppendUint64(dst, v), pad...)
	}})
	if err != nil {
		b.Fatal(err)
	}
	sub := p.Subpartition(0)
	b.ReportAllocs()
	b.SetBytes(16 + lengthSize)
	b.ResetTimer()
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		if err := w.Emit(uint64(i)); err != nil {
			b.Fatal(err)
		}
		if i&1023 == 0 {
			for r := sub.Poll(); r.Buffer != nil; r = sub.Poll() {
				r.Buffer.Release()
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	cpu.report(b)
	p.Release()
}

func benchDeserialize(b *testing.B, recSize int) {
	stream := make([]byte, 0, buffer.DefaultSegmentSize)
	rec := make([]byte, recSize)
	per := 0
	for len(stream)+lengthSize+recSize <= cap(stream) {
		stream = binary.BigEndian.AppendUint32(stream, uint32(recSize))
		stream = append(stream, rec...)
		per++
	}
	d := NewDeserializer("bench", 0)
	b.ReportAllocs()
	b.SetBytes(int64(recSize + lengthSize))
	b.ResetTimer()
	cpu := startCPU()
	for n := 0; n < b.N; {
		d.SetBuffer(buffer.Wrap(stream, buffer.Data))
		for {
			if _, ok := d.TryNext(); !ok {
				if _, ok, _ = d.Next(); !ok {
					break
				}
			}
			n++
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	cpu.report(b)
}

func BenchmarkDeserialize16(b *testing.B)  { benchDeserialize(b, 16) }
func BenchmarkDeserialize100(b *testing.B) { benchDeserialize(b, 100) }

// drainGate reads gate until its end-of-partition event, deserializing
// every record, and returns how many it read and the sum of their leading
// big-endian uint64s.
func drainGate(b *testing.B, gate *InputGate) (got, sum uint64) { return drainGateWork(b, gate, 0) }

// drainGateWork is drainGate spending work rounds of a xorshift on every
// record (a consumer slower than its producer).
func drainGateWork(b *testing.B, gate *InputGate, work int) (got, sum uint64) {
	x := uint64(1)
	d := NewDeserializer("bench", 0)
	defer d.Close()
	for {
		_, buf, err := gate.PollNext()
		if err != nil {
			b.Fatal(err)
		}
		if buf == nil {
			<-gate.Ready()
			continue
		}
		if !buf.IsData() {
			buf.Release()
			return got, sum
		}
		d.SetBuffer(buf)
		for {
			rec, ok := d.TryNext()
			if !ok {
				var err error
				if rec, ok, err = d.Next(); err != nil {
					b.Fatal(err)
				}
				if !ok {
					break
				}
			}
			sum += binary.BigEndian.Uint64(rec)
			got++
			for range work {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
			}
		}
		if x == 0 {
			b.Fatal("xorshift reached 0")
		}
	}
}
