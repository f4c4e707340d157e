package network

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/weirstream/weir/buffer"
)

// FuzzDeserializer feeds arbitrary bytes, cut into buffers at arbitrary
// points, to the deserializer: it never panics, and a well-formed stream
// of records decodes to the same records whatever the cuts.
func FuzzDeserializer(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c'}, uint8(2))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 'x'}, uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2}, uint8(3))
	f.Add(bytes.Repeat([]byte{0, 0, 0, 1, 7}, 20), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		step := int(cut%16) + 1
		d := NewDeserializer("fuzz", 1<<16)
		defer d.Close()
		var got [][]byte
		var failed bool
		for off := 0; off < len(data) && !failed; off += step {
			end := min(off+step, len(data))
			d.SetBuffer(buffer.Wrap(append([]byte(nil), data[off:end]...), buffer.Data))
			for {
				rec, ok, err := d.Next()
				if err != nil {
					failed = true
					break
				}
				if !ok {
					break
				}
				got = append(got, append([]byte{}, rec...))
			}
			if failed {
				d.Close()
			}
		}
		if failed {
			return
		}
		// Re-encoding what was decoded gives back the stream's complete
		// prefix.
		var enc []byte
		for _, r := range got {
			enc = binary.BigEndian.AppendUint32(enc, uint32(len(r)))
			enc = append(enc, r...)
		}
		if !bytes.Equal(enc, data[:len(enc)]) {
			t.Fatalf("decoded records do not re-encode to the input prefix")
		}
		if !d.Pending() && len(enc) != len(data) && len(data)-len(enc) >= lengthSize {
			t.Fatalf("%d bytes left undecoded without a pending record", len(data)-len(enc))
		}
	})
}
