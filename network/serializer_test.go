package network

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
)

// encodeStream is the reference encoding: length prefix + bytes per record.
func encodeStream(recs [][]byte) []byte {
	var out []byte
	for _, r := range recs {
		out = binary.BigEndian.AppendUint32(out, uint32(len(r)))
		out = append(out, r...)
	}
	return out
}

// feed cuts stream at the given offsets into buffers and returns every
// record the deserializer produced.
func feed(t *testing.T, stream []byte, cuts []int) ([][]byte, error) {
	t.Helper()
	d := NewDeserializer("test", 1<<20)
	defer d.Close()
	var got [][]byte
	prev := 0
	for _, c := range append(cuts, len(stream)) {
		if c <= prev {
			continue
		}
		pending := d.Pending()
		d.SetBuffer(buffer.Wrap(append([]byte(nil), stream[prev:c]...), buffer.Data))
		prev = c
		// Records yields the records Next then returns from this buffer
		// but the end of one pending before it.
		var peeked [][]byte
		for rec := range d.Records {
			peeked = append(peeked, append([]byte{}, rec...))
		}
		from := len(got)
		for {
			rec, ok, err := d.Next()
			if err != nil {
				return got, err
			}
			if !ok {
				break
			}
			got = append(got, append([]byte{}, rec...))
		}
		whole := got[from:]
		if pending && len(whole) > 0 {
			whole = whole[1:]
		}
		require.Equal(t, len(whole), len(peeked), "Records of buffer ending at %d", c)
		for i := range whole {
			require.Equal(t, whole[i], peeked[i], "Records of buffer ending at %d", c)
		}
		require.False(t, d.HasBuffer(), "buffer not released after use")
	}
	require.False(t, d.Pending(), "record left incomplete")
	return got, nil
}

// Every record split at every byte offset of its length prefix and body.
func TestDeserializerSplitAtEveryOffset(t *testing.T) {
	recs := [][]byte{[]byte("a"), {}, []byte("hello, world"), bytes.Repeat([]byte{7}, 300), []byte("z")}
	stream := encodeStream(recs)
	for cut := 0; cut <= len(stream); cut++ {
		got, err := feed(t, stream, []int{cut})
		require.NoError(t, err, "cut %d", cut)
		require.Equal(t, recs, got, "cut %d", cut)
	}
	// Two cuts: a record spread over three or more buffers.
	for c1 := 0; c1 <= len(stream); c1 += 3 {
		for c2 := c1; c2 <= len(stream); c2 += 5 {
			got, err := feed(t, stream, []int{c1, c2})
			require.NoError(t, err, "cuts %d,%d", c1, c2)
			require.Equal(t, recs, got, "cuts %d,%d", c1, c2)
		}
	}
}

func TestDeserializerOneByteBuffers(t *testing.T) {
	recs := [][]byte{bytes.Repeat([]byte("x"), 1000), []byte("y")}
	stream := encodeStream(recs)
	cuts := make([]int, len(stream))
	for i := range cuts {
		cuts[i] = i
	}
	got, err := feed(t, stream, cuts)
	require.NoError(t, err)
	require.Equal(t, recs, got)
}

func TestDeserializerCorruptLength(t *testing.T) {
	stream := binary.BigEndian.AppendUint32(nil, 1<<30)
	_, err := feed(t, append(stream, 1, 2, 3), []int{2})
	var de *DeserializeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "test", de.Channel)
	_, err = feed(t, append(stream, 1, 2, 3), nil)
	require.ErrorAs(t, err, &de)
}

// The serializer, writing through a real partition with tiny segments,
// produces exactly the reference stream, whatever the record sizes.
func TestPartitionWriteSpansBuffers(t *testing.T) {
	for _, segSize := range []int{64, 65, 100, 1024} {
		t.Run(fmt.Sprint(segSize), func(t *testing.T) {
			g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: segSize, NumSegments: 1000})
			require.NoError(t, err)
			pool, err := g.NewLocalPool(2, 1000)
			require.NoError(t, err)
			p, err := NewResultPartition(newID(), "p", 1, pool)
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(1, uint64(segSize)))
			var recs [][]byte
			for i := 0; i < 300; i++ {
				n := r.IntN(200)
				if i%50 == 0 {
					n = 5000 // larger than a segment
				}
				rec := make([]byte, n)
				for j := range rec {
					rec[j] = byte(r.Uint32())
				}
				recs = append(recs, rec)
				if i%2 == 0 {
					require.NoError(t, p.Write(0, rec))
				} else {
					require.NoError(t, AppendRecord(p, 0, func(dst []byte, v []byte) []byte { return append(dst, v...) }, rec))
				}
				if i%37 == 0 {
					p.Flush()
				}
			}
			p.Flush()
			var stream []byte
			sub := p.Subpartition(0)
			for {
				r := sub.Poll()
				if r.Buffer == nil {
					break
				}
				stream = append(stream, r.Buffer.Bytes()...)
				r.Buffer.Release()
			}
			require.Equal(t, encodeStream(recs), stream)
			p.Release()
			require.Equal(t, 0, g.InUse())
		})
	}
}

// A forward RecordWriter produces the reference stream whatever its
// encoder does with the slice it is given: append in place, grow it past
// the buffer, return a slice of its own, or return part of what it
// appended (a slice into the buffer that is not where the record starts).
func TestRecordWriterForwardEncoders(t *testing.T) {
	own := []byte("a slice of the encoder's own")
	encoders := map[string]func(dst, v []byte) []byte{
		"append":  func(dst, v []byte) []byte { return append(dst, v...) },
		"own":     func(dst, v []byte) []byte { return append(own[:0:0], v...) },
		"shifted": func(dst, v []byte) []byte { return append(append(dst, 0xee), v...)[1:] },
		"grown": func(dst, v []byte) []byte {
			return append(append(dst[:0:0], make([]byte, 0, len(dst)+1)...), v...)
		},
	}
	for name, enc := range encoders {
		for _, segSize := range []int{64, 100, 1024} {
			t.Run(fmt.Sprintf("%s/%d", name, segSize), func(t *testing.T) {
				g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: segSize, NumSegments: 1000})
				require.NoError(t, err)
				pool, err := g.NewLocalPool(2, 1000)
				require.NoError(t, err)
				p, err := NewResultPartition(newID(), "p", 1, pool)
				require.NoError(t, err)
				w, err := NewRecordWriter(p, WriterConfig[[]byte]{Partitioning: Forward, Append: enc})
				require.NoError(t, err)
				r := rand.New(rand.NewPCG(2, uint64(segSize)))
				var recs [][]byte
				for i := 0; i < 400; i++ {
					n := r.IntN(40)
					switch i % 50 {
					case 0:
						n = 3000 // larger than a segment
					case 7, 8:
						n = 0
					}
					rec := make([]byte, n)
					for j := range rec {
						rec[j] = byte(r.Uint32())
					}
					recs = append(recs, rec)
					require.NoError(t, w.Emit(rec))
					if i%41 == 0 {
						p.Flush()
					}
				}
				p.Flush()
				require.Equal(t, int64(len(recs)), p.Stats().Records)
				var stream []byte
				sub := p.Subpartition(0)
				for {
					r := sub.Poll()
					if r.Buffer == nil {
						break
					}
					stream = append(stream, r.Buffer.Bytes()...)
					r.Buffer.Release()
				}
				require.Equal(t, encodeStream(recs), stream)
				p.Release()
				require.Equal(t, 0, g.InUse())
			})
		}
	}
}
