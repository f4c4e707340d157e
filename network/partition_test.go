package network

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/internal/keygroup"
)

// drainSub polls every buffer queued in sub and returns the concatenated
// bytes of its data buffers and how many there were.
func drainSub(t *testing.T, sub *Subpartition) (stream []byte, buffers int) {
	t.Helper()
	for {
		r := sub.Poll()
		if r.Buffer == nil {
			return stream, buffers
		}
		require.True(t, r.Buffer.IsData())
		stream = append(stream, r.Buffer.Bytes()...)
		buffers++
		r.Buffer.Release()
	}
}

// A RecordWriter sends every record to the subpartitions a naive model of
// its partitioning picks, in order, records spanning buffers included
// (with hash partitioning, with or without their key group before them),
// and the partition's statistics count what was written.
func TestRecordWriterPartitionings(t *testing.T) {
	type rec struct {
		key  uint64
		body []byte
	}
	appendRec := func(dst []byte, r rec) []byte { return append(dst, r.body...) }
	keyHash := func(r rec) uint64 { return r.key }
	for _, mode := range []Partitioning{Forward, Rebalance, Hash, Broadcast} {
		for _, nsub := range []int{1, 3} {
			for _, cfg := range []struct {
				maxPar int
				prefix bool
			}{{0, false}, {7, false}, {7, true}, {300, true}} {
				maxPar, prefix := cfg.maxPar, cfg.prefix
				if mode != Hash && (maxPar != 0 || prefix) {
					continue
				}
				t.Run(fmt.Sprintf("%s/subs=%d/maxpar=%d/prefix=%v", mode, nsub, maxPar, prefix), func(t *testing.T) {
					g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 64, NumSegments: 10000})
					require.NoError(t, err)
					pool, err := g.NewLocalPool(nsub+1, 10000)
					require.NoError(t, err)
					p, err := NewResultPartition(newID(), "p", nsub, pool)
					require.NoError(t, err)
					subtask := nsub - 1
					w, err := NewRecordWriter(p, WriterConfig[rec]{Partitioning: mode, Append: appendRec,
						KeyHash: keyHash, MaxParallelism: maxPar, Subtask: subtask, KeyGroupPrefix: prefix})
					require.NoError(t, err)

					mp := maxPar
					if mp == 0 {
						mp = keygroup.DefaultMaxParallelism
					}
					want := make([][][]byte, nsub)
					var writes, bytes int64
					r := rand.New(rand.NewPCG(uint64(mode), uint64(nsub)))
					rr := 0
					for i := range 500 {
						n := r.IntN(40)
						if i%61 == 0 {
							n = 200 // spans several 64-byte segments
						}
						v := rec{key: r.Uint64(), body: make([]byte, n)}
						for j := range v.body {
							v.body[j] = byte(r.Uint32())
						}
						var subs []int
						switch mode {
						case Forward:
							subs = []int{subtask}
						case Rebalance:
							subs = []int{rr}
							rr = (rr + 1) % nsub
						case Hash:
							subs = []int{keygroup.Operator(keygroup.ForHash(v.key, mp), mp, nsub)}
						case Broadcast:
							for s := range nsub {
								subs = append(subs, s)
							}
						}
						body := v.body
						if prefix {
							g := keygroup.ForHash(v.key, mp)
							body = append([]byte{byte(g >> 8), byte(g)}, body...)
							gotG, rest, ok := KeyGroupOf(body)
							require.True(t, ok)
							require.Equal(t, g, gotG)
							require.Equal(t, v.body, rest)
						}
						for _, s := range subs {
							want[s] = append(want[s], body)
							writes++
							bytes += int64(lengthSize + len(body))
						}
						require.NoError(t, w.Emit(v))
						if i%97 == 0 {
							p.Flush()
						}
					}
					p.Flush()
					var buffers int64
					for s := range nsub {
						stream, nb := drainSub(t, p.Subpartition(s))
						require.Equal(t, encodeStream(want[s]), stream, "subpartition %d", s)
						buffers += int64(nb)
					}
					st := p.Stats()
					require.Equal(t, writes, st.Records)
					require.Equal(t, bytes, st.Bytes)
					require.Equal(t, buffers, st.Buffers)
					p.Release()
					require.Equal(t, 0, g.InUse())
				})
			}
		}
	}
}

// Statistics count records written but not yet flushed, and those dropped
// by Release.
func TestPartitionStatsUnflushed(t *testing.T) {
	g, err := buffer.NewGlobalPool(buffer.Config{})
	require.NoError(t, err)
	pool, err := g.NewLocalPool(2, 4)
	require.NoError(t, err)
	p, err := NewResultPartition(newID(), "p", 1, pool)
	require.NoError(t, err)
	require.NoError(t, p.Write(0, []byte("abc")))
	require.NoError(t, AppendRecord(p, 0, func(dst []byte, v string) []byte { return append(dst, v...) }, "de"))
	st := p.Stats()
	require.Equal(t, int64(2), st.Records)
	require.Equal(t, int64(4+3+4+2), st.Bytes)
	require.Equal(t, int64(0), st.Buffers)
	p.Release()
	st = p.Stats()
	require.Equal(t, int64(2), st.Records)
	require.Equal(t, int64(4+3+4+2), st.Bytes)
	require.Equal(t, 0, g.InUse())
}

// countingListener counts notifications.
type countingListener struct{ n int }

func (l *countingListener) NotifyDataAvailable() { l.n++ }
func (l *countingListener) NotifyPriority()      {}

// A subpartition counts its backlog of data buffers, tells its reader
// when it has something again, and hands out nothing after an aligned
// barrier until Resume.
func TestSubpartitionBacklogAndBarrier(t *testing.T) {
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 64, NumSegments: 100})
	require.NoError(t, err)
	pool, err := g.NewLocalPool(2, 100)
	require.NoError(t, err)
	p, err := NewResultPartition(newID(), "p", 1, pool)
	require.NoError(t, err)
	sub := p.Subpartition(0)
	l := &countingListener{}

	require.NoError(t, p.Write(0, bytes.Repeat([]byte{1}, 150))) // two full buffers, a third started
	p.Flush()
	require.Equal(t, 3, sub.Backlog())
	require.NoError(t, sub.Attach(l))
	require.Equal(t, 1, l.n, "attach to a non-empty subpartition notifies")
	require.Error(t, sub.Attach(l), "second reader")

	barrier := []byte{9}
	p.BroadcastEvent(barrier, buffer.AlignedBarrier)
	require.NoError(t, p.Write(0, []byte{2}))
	p.Flush()
	require.Equal(t, 1, l.n, "adding to a non-empty queue does not notify")
	require.Equal(t, 4, sub.Backlog())

	typ, ok, backlog := sub.Peek()
	require.True(t, ok)
	require.Equal(t, buffer.Data, typ)
	require.Equal(t, 4, backlog)
	for i := 3; i >= 1; i-- {
		r := sub.Poll()
		require.NotNil(t, r.Buffer)
		require.Equal(t, i, r.Backlog, "data buffers after this one")
		require.True(t, r.More)
		if i > 1 {
			require.Equal(t, buffer.Data, r.NextType)
		} else {
			require.Equal(t, buffer.AlignedBarrier, r.NextType)
		}
		r.Buffer.Release()
	}
	r := sub.Poll()
	require.Equal(t, buffer.AlignedBarrier, r.Buffer.Type())
	require.Equal(t, barrier, r.Buffer.Bytes())
	require.Equal(t, 1, r.Backlog)
	require.False(t, r.More, "blocked after an aligned barrier")
	r.Buffer.Release()

	r = sub.Poll()
	require.Nil(t, r.Buffer, "blocked")
	require.Equal(t, 1, r.Backlog)
	_, ok, backlog = sub.Peek()
	require.False(t, ok)
	require.Equal(t, 1, backlog)

	sub.Resume()
	require.Equal(t, 2, l.n, "resume with data queued notifies")
	sub.Resume()
	require.Equal(t, 2, l.n, "resume when not blocked does nothing")
	r = sub.Poll()
	require.Equal(t, []byte{0, 0, 0, 1, 2}, r.Buffer.Bytes())
	require.Equal(t, 0, r.Backlog)
	require.False(t, r.More)
	r.Buffer.Release()

	// Empty and unblocked: the next buffer notifies, an event too.
	p.BroadcastEvent([]byte{7}, buffer.Event)
	require.Equal(t, 3, l.n)
	require.Equal(t, 0, sub.Backlog(), "events are not backlog")
	r = sub.Poll()
	require.Equal(t, buffer.Event, r.Buffer.Type())
	r.Buffer.Release()

	// Blocked and empty: a resume with nothing queued does not notify, the
	// next buffer does.
	p.BroadcastEvent(barrier, buffer.TimeoutableAlignedBarrier)
	require.Equal(t, 4, l.n)
	r = sub.Poll()
	require.Equal(t, buffer.TimeoutableAlignedBarrier, r.Buffer.Type())
	r.Buffer.Release()
	require.NoError(t, p.Write(0, []byte{3}))
	p.Flush()
	require.Equal(t, 4, l.n, "data behind a barrier does not notify")
	sub.Resume()
	require.Equal(t, 5, l.n)
	r = sub.Poll()
	require.Equal(t, []byte{0, 0, 0, 1, 3}, r.Buffer.Bytes())
	r.Buffer.Release()

	// Release drops what is queued; later buffers are dropped at once.
	require.NoError(t, p.Write(0, []byte{4}))
	p.Flush()
	sub.Release()
	require.Equal(t, 0, sub.Backlog())
	require.Nil(t, sub.Poll().Buffer)
	require.NoError(t, p.Write(0, []byte{5}))
	p.Flush()
	require.Nil(t, sub.Poll().Buffer)
	p.Release()
	require.Equal(t, 0, g.InUse())
}

// naiveDecode is the reference deserializer: it reads stream from the
// start and returns the complete records before the first length above
// maxSize, whether such a length was read, and whether the stream ends
// inside a record.
func naiveDecode(stream []byte, maxSize int) (recs [][]byte, corrupt, pending bool) {
	for len(stream) > 0 {
		if len(stream) < lengthSize {
			return recs, false, true
		}
		n := int(binary.BigEndian.Uint32(stream))
		if n > maxSize {
			return recs, true, false
		}
		if len(stream)-lengthSize < n {
			return recs, false, true
		}
		recs = append(recs, stream[lengthSize:lengthSize+n])
		stream = stream[lengthSize+n:]
	}
	return recs, false, false
}

// The deserializer agrees with the naive model over random streams cut into
// random buffers, with a maximum record size above, inside and below the
// records' sizes.
func TestDeserializerMatchesModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	for iter := range 3000 {
		var stream []byte
		for range r.IntN(30) {
			n := r.IntN(60)
			if r.IntN(20) == 0 {
				n = 300 + r.IntN(300)
			}
			stream = binary.BigEndian.AppendUint32(stream, uint32(n))
			for range n {
				stream = append(stream, byte(r.Uint32()))
			}
		}
		if r.IntN(3) == 0 && len(stream) > 0 {
			stream = stream[:r.IntN(len(stream))] // ends inside a record
		}
		maxSize := []int{1 << 20, 100, 30, 0}[r.IntN(4)]
		wantRecs, wantCorrupt, wantPending := naiveDecode(stream, maxSize)

		d := NewDeserializer("model", maxSize)
		if maxSize == 0 {
			wantRecs, wantCorrupt, wantPending = naiveDecode(stream, DefaultMaxRecordSize)
		}
		var got [][]byte
		var corrupt bool
		maxCut := []int{4, 50, 1000}[r.IntN(3)]
		for off := 0; off < len(stream) && !corrupt; {
			end := min(off+1+r.IntN(maxCut), len(stream))
			d.SetBuffer(buffer.Wrap(append([]byte(nil), stream[off:end]...), buffer.Data))
			off = end
			for {
				rec, ok, err := d.Next()
				if err != nil {
					var de *DeserializeError
					require.ErrorAs(t, err, &de, "iteration %d", iter)
					corrupt = true
					break
				}
				if !ok {
					require.False(t, d.HasBuffer(), "iteration %d: buffer kept after use", iter)
					break
				}
				got = append(got, append([]byte{}, rec...))
			}
		}
		require.Equal(t, len(wantRecs), len(got), "iteration %d", iter)
		for i := range got {
			require.Equal(t, wantRecs[i], got[i], "iteration %d record %d", iter, i)
		}
		require.Equal(t, wantCorrupt, corrupt, "iteration %d", iter)
		if !corrupt {
			require.Equal(t, wantPending, d.Pending(), "iteration %d", iter)
		}
		d.Close()
		require.False(t, d.HasBuffer())
		require.False(t, d.Pending())
	}
}

// Producers and consumers on their own goroutines, through partitions,
// local channels and gates, with tiny pools (back pressure on every
// buffer), records spanning buffers and aligned barriers: every consumer
// gets every record of its subpartitions in order, and blocks each channel
// from its barrier until it has the barrier of every channel.
func TestLocalExchange(t *testing.T) {
	const (
		producers = 2
		consumers = 2
		records   = 20000
		every     = 3000 // records between barriers
	)
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 128, NumSegments: 100})
	require.NoError(t, err)
	parts := make([]*ResultPartition, producers)
	for i := range parts {
		pool, err := g.NewLocalPool(consumers+1, consumers+1)
		require.NoError(t, err)
		parts[i], err = NewResultPartition(newID(), fmt.Sprint("p", i), consumers, pool)
		require.NoError(t, err)
	}
	gates := make([]*InputGate, consumers)
	for c := range gates {
		chans := make([]InputChannel, producers)
		for i, p := range parts {
			chans[i] = NewLocalChannel(fmt.Sprintf("p%d[%d]", i, c), p.Subpartition(c))
		}
		gates[c] = NewInputGate(fmt.Sprint("g", c), chans)
		require.NoError(t, gates[c].Start())
	}
	errs := make(chan error, producers+consumers)
	for _, p := range parts {
		go func() {
			w, err := NewRecordWriter(p, WriterConfig[uint64]{Partitioning: Rebalance, Append: func(dst []byte, v uint64) []byte {
				dst = binary.BigEndian.AppendUint64(dst, v)
				return append(dst, make([]byte, v%300)...) // up to 3 segments
			}})
			if err != nil {
				errs <- err
				return
			}
			for v := range uint64(records) {
				if err := w.Emit(v); err != nil {
					errs <- err
					return
				}
				if v%every == every-1 {
					p.BroadcastEvent([]byte{byte(v / every)}, buffer.AlignedBarrier)
				}
			}
			p.Finish(eop)
			p.ReleaseProducer()
			errs <- nil
		}()
	}
	for c, gate := range gates {
		go func() {
			errs <- func() error {
				d := make([]*Deserializer, producers)
				for i := range d {
					d[i] = NewDeserializer("d", 0)
					defer d[i].Close()
				}
				next := make([]uint64, producers) // next record expected per channel
				for i := range next {
					next[i] = uint64(c)
				}
				blocked := make([]int, producers) // barrier number +1 a channel is blocked at
				ended := 0
				for ended < producers {
					ch, b, err := gate.PollNext()
					if err != nil {
						return err
					}
					if b == nil {
						<-gate.Ready()
						continue
					}
					if blocked[ch] != 0 {
						return fmt.Errorf("consumer %d: channel %d delivered after barrier %d", c, ch, blocked[ch]-1)
					}
					switch b.Type() {
					case buffer.Data:
						d[ch].SetBuffer(b)
						for {
							rec, ok, err := d[ch].Next()
							if err != nil {
								return err
							}
							if !ok {
								break
							}
							v := binary.BigEndian.Uint64(rec)
							if v != next[ch] || len(rec) != 8+int(v%300) {
								return fmt.Errorf("consumer %d channel %d: record %d (%d bytes), want %d", c, ch, v, len(rec), next[ch])
							}
							next[ch] += consumers
						}
						continue
					case buffer.AlignedBarrier:
						blocked[ch] = int(b.Bytes()[0]) + 1
						aligned := true
						for _, x := range blocked {
							aligned = aligned && x == blocked[ch]
						}
						if aligned {
							for i := range blocked {
								blocked[i] = 0
								gate.Resume(i)
							}
						}
					default:
						if !bytes.Equal(b.Bytes(), eop) {
							return fmt.Errorf("consumer %d: unexpected event %x", c, b.Bytes())
						}
						ended++
					}
					b.Release()
				}
				for ch, n := range next {
					if n < records {
						return fmt.Errorf("consumer %d channel %d: ended at record %d", c, ch, n)
					}
				}
				return nil
			}()
		}()
	}
	for range producers + consumers {
		require.NoError(t, <-errs)
	}
	for _, gate := range gates {
		gate.Close()
	}
	require.Equal(t, 0, g.InUse())
}

// Only a hash writer writes key groups; asking another for them is an
// error, not records its consumer would misread.
func TestRecordWriterKeyGroupPrefixNeedsHash(t *testing.T) {
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 64, NumSegments: 16})
	require.NoError(t, err)
	pool, err := g.NewLocalPool(2, 16)
	require.NoError(t, err)
	p, err := NewResultPartition(newID(), "p", 2, pool)
	require.NoError(t, err)
	defer p.Release()
	for _, mode := range []Partitioning{Forward, Rebalance, Broadcast} {
		_, err := NewRecordWriter(p, WriterConfig[[]byte]{Partitioning: mode, KeyGroupPrefix: true,
			Append: func(dst, v []byte) []byte { return append(dst, v...) }})
		require.ErrorContains(t, err, "key group prefix without hash partitioning", mode.String())
	}
	_, _, ok := KeyGroupOf([]byte{1})
	require.False(t, ok)
}
