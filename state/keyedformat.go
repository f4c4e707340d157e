package state

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/weirstream/weir/internal/keygroup"
)

// The keyed snapshot file format (version 1). All integers are uvarints
// unless noted; crc is a little-endian uint32 CRC32C.
//
//	file    = header section*            (one section per key group of the range, in order)
//	header  = "WKS1" maxParallelism start end nStates (nameLen name kind:u8)* crc(header bytes)
//	section = record* 0x00 crc(section bytes up to and including the 0x00)
//	record  = stateIndex+1 keyLen key [userKeyLen userKey  (map states only)] valueLen value
//
// KeyedStateHandle.Offsets[i] is the file offset of the section of key group
// KeyGroups.Start+i, so a restore reads only the sections it owns. Every
// backend writes and reads this format, so snapshots are portable between
// backends.

var keyedMagic = [4]byte{'W', 'K', 'S', '1'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// KeyedSnapshotWriter writes a keyed snapshot file. Create it with
// NewKeyedSnapshotWriter (which writes the header), then BeginKeyGroup for every group of the range in
// order with the group's records after it, then Close (or Abort).
type KeyedSnapshotWriter struct {
	sw     StateWriter
	bw     *bufio.Writer
	crc    hash.Hash32
	off    int64
	rng    keygroup.Range
	states []StateMeta
	offs   []int64
	next   int // next group expected
	open   bool
	err    error
	buf    []byte
}

// NewKeyedSnapshotWriter starts a keyed snapshot file on sw for the key
// groups rng of a job with maxParallelism groups and the given states
// (indexed by position in records).
func NewKeyedSnapshotWriter(sw StateWriter, maxParallelism int, rng keygroup.Range, states []StateMeta) *KeyedSnapshotWriter {
	w := &KeyedSnapshotWriter{
		sw: sw, bw: bufio.NewWriterSize(sw, 256<<10), crc: crc32.New(castagnoli),
		rng: rng, states: states, offs: make([]int64, 0, rng.Len()), next: rng.Start,
	}
	h := append(make([]byte, 0, 64), keyedMagic[:]...)
	h = binary.AppendUvarint(h, uint64(maxParallelism))
	h = binary.AppendUvarint(h, uint64(rng.Start))
	h = binary.AppendUvarint(h, uint64(rng.End))
	h = binary.AppendUvarint(h, uint64(len(states)))
	for _, s := range states {
		h = binary.AppendUvarint(h, uint64(len(s.Name)))
		h = append(h, s.Name...)
		h = append(h, byte(s.Kind))
	}
	h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
	w.write(h)
	return w
}

func (w *KeyedSnapshotWriter) write(p []byte) {
	if w.err != nil {
		return
	}
	_, w.err = w.bw.Write(p)
	w.off += int64(len(p))
	if w.open {
		w.crc.Write(p)
	}
}

func (w *KeyedSnapshotWriter) endSection() {
	if !w.open {
		return
	}
	w.write([]byte{0})
	w.open = false
	w.write(binary.LittleEndian.AppendUint32(w.buf[:0], w.crc.Sum32()))
}

// BeginKeyGroup starts the section of key group g. Groups must come in
// order, every group of the range exactly once.
func (w *KeyedSnapshotWriter) BeginKeyGroup(g int) error {
	if w.err != nil {
		return w.err
	}
	if g != w.next || !w.rng.Contains(g) {
		return fmt.Errorf("state: key group %d written out of order (want %d of %s)", g, w.next, w.rng)
	}
	w.endSection()
	w.offs = append(w.offs, w.off)
	w.next++
	w.crc.Reset()
	w.open = true
	return w.err
}

// Record writes one record of the current key group: state is an index into
// the writer's states; userKey is used only for map states.
func (w *KeyedSnapshotWriter) Record(state int, key, userKey, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if !w.open {
		return errors.New("state: record outside a key group")
	}
	if state < 0 || state >= len(w.states) {
		return fmt.Errorf("state: record for unknown state index %d", state)
	}
	b := binary.AppendUvarint(w.buf[:0], uint64(state)+1)
	b = appendFramed(b, key)
	if w.states[state].Kind == KindMap {
		b = appendFramed(b, userKey)
	}
	b = binary.AppendUvarint(b, uint64(len(value)))
	w.buf = b
	w.write(b)
	w.write(value)
	return w.err
}

// Close finishes the file and returns its handle.
func (w *KeyedSnapshotWriter) Close() (*KeyedStateHandle, error) {
	if w.err == nil && w.next != w.rng.End+1 {
		w.err = fmt.Errorf("state: keyed snapshot closed after group %d of %s", w.next-1, w.rng)
	}
	w.endSection()
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	if w.err != nil {
		_ = w.sw.Abort()
		return nil, w.err
	}
	sh, err := w.sw.Close()
	if err != nil {
		_ = w.sw.Abort()
		return nil, err
	}
	return &KeyedStateHandle{StreamHandle: sh, KeyGroups: w.rng, Offsets: w.offs}, nil
}

// Abort discards the file.
func (w *KeyedSnapshotWriter) Abort() error { return w.sw.Abort() }

// KeyedRecord is one record read back from a keyed snapshot. Its slices are
// valid only during the callback.
type KeyedRecord struct {
	State    StateMeta
	KeyGroup int
	Key      []byte
	UserKey  []byte // map states only
	Value    []byte
}

// ReadKeyedSnapshots reads, from the keyed snapshots of all previous
// subtasks, exactly the records of the key groups in rng, and calls fn for
// each. onStates, if not nil, is called with each file's states before its
// records. Files are verified by r; sections by their own CRC.
func ReadKeyedSnapshots(handles []KeyedStateHandle, maxParallelism int, rng keygroup.Range, r StateReader,
	onStates func([]StateMeta) error, fn func(KeyedRecord) error) error {
	for i := range handles {
		h := &handles[i]
		lo, hi := max(h.KeyGroups.Start, rng.Start), min(h.KeyGroups.End, rng.End)
		if lo > hi {
			continue
		}
		if h.Incremental != nil {
			return fmt.Errorf("state: the keyed state of key groups %s is an incremental snapshot of backend %s: only the backend kind that wrote it restores it (restore from a savepoint to change backends)", h.KeyGroups, h.Incremental.Backend)
		}
		if len(h.Offsets) != h.KeyGroups.Len() {
			return &CorruptError{Path: h.Path, Reason: fmt.Sprintf("handle has %d offsets for key groups %s", len(h.Offsets), h.KeyGroups)}
		}
		if err := readKeyedFile(h, maxParallelism, lo, hi, r, onStates, fn); err != nil {
			return err
		}
	}
	return nil
}

func readKeyedFile(h *KeyedStateHandle, maxParallelism, lo, hi int, r StateReader,
	onStates func([]StateMeta) error, fn func(KeyedRecord) error) (err error) {
	f, err := r.OpenState(h.StreamHandle)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: h.Path, Reason: fmt.Sprintf(format, args...)}
	}
	cr := newCRCReader(io.NewSectionReader(f, 0, f.Size()))
	var magic [4]byte
	if _, err := io.ReadFull(cr, magic[:]); err != nil || magic != keyedMagic {
		return corrupt("bad keyed snapshot magic")
	}
	mp, err1 := binary.ReadUvarint(cr)
	start, err2 := binary.ReadUvarint(cr)
	end, err3 := binary.ReadUvarint(cr)
	n, err4 := binary.ReadUvarint(cr)
	if err := errors.Join(err1, err2, err3, err4); err != nil || n > 1<<20 {
		return corrupt("bad keyed snapshot header")
	}
	if int(mp) != maxParallelism {
		return fmt.Errorf("state: %s was written with max parallelism %d, job has %d", h.Path, mp, maxParallelism)
	}
	if int(start) != h.KeyGroups.Start || int(end) != h.KeyGroups.End {
		return corrupt("file key groups [%d,%d] differ from handle %s", start, end, h.KeyGroups)
	}
	states := make([]StateMeta, n)
	for i := range states {
		name, err := cr.readFramed(1 << 16)
		if err != nil {
			return corrupt("bad state name: %v", err)
		}
		k, err := cr.ReadByte()
		if err != nil || !Kind(k).Valid() {
			return corrupt("bad state kind")
		}
		states[i] = StateMeta{Name: string(name), Kind: Kind(k)}
	}
	if err := cr.checkCRC(); err != nil {
		return corrupt("header: %v", err)
	}
	if onStates != nil {
		if err := onStates(states); err != nil {
			return err
		}
	}
	for g := lo; g <= hi; g++ {
		off := h.Offsets[g-h.KeyGroups.Start]
		if off < 0 || off >= f.Size() {
			return corrupt("key group %d offset %d outside file", g, off)
		}
		cr := newCRCReader(io.NewSectionReader(f, off, f.Size()-off))
		for {
			si, err := binary.ReadUvarint(cr)
			if err != nil {
				return corrupt("key group %d: %v", g, err)
			}
			if si == 0 {
				break
			}
			if si > uint64(len(states)) {
				return corrupt("key group %d: state index %d of %d", g, si, len(states))
			}
			rec := KeyedRecord{State: states[si-1], KeyGroup: g}
			cr.resetRecord()
			if rec.Key, err = cr.readFramed(1 << 30); err == nil && rec.State.Kind == KindMap {
				rec.UserKey, err = cr.readFramed(1 << 30)
			}
			if err == nil {
				rec.Value, err = cr.readFramed(1 << 30)
			}
			if err != nil {
				return corrupt("key group %d: %v", g, err)
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
		if err := cr.checkCRC(); err != nil {
			return corrupt("key group %d: %v", g, err)
		}
	}
	return nil
}

// crcReader reads through a buffer, keeping a running CRC32C of what it
// returned.
type crcReader struct {
	br  *bufio.Reader
	crc uint32
	buf []byte
}

func newCRCReader(r io.Reader) *crcReader {
	return &crcReader{br: bufio.NewReaderSize(r, 64<<10)}
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.br.Read(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	return n, err
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.br.ReadByte()
	if err == nil {
		c.crc = crc32.Update(c.crc, castagnoli, []byte{b})
	}
	return b, err
}

// readFramed reads uvarint(len) | bytes, appending to the record buffer
// (see resetRecord), so that the slices of one record stay valid together.
func (c *crcReader) readFramed(limit uint64) ([]byte, error) {
	n, err := binary.ReadUvarint(c)
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("length %d too large", n)
	}
	start := len(c.buf)
	c.buf = append(c.buf, make([]byte, n)...)
	b := c.buf[start:len(c.buf):len(c.buf)]
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	return b, nil
}

// resetRecord reuses the record buffer for the next record.
func (c *crcReader) resetRecord() { c.buf = c.buf[:0] }

// checkCRC reads the stored little-endian CRC and compares it with the
// running one.
func (c *crcReader) checkCRC() error {
	want := c.crc
	var b [4]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return fmt.Errorf("missing checksum: %w", err)
	}
	if got := binary.LittleEndian.Uint32(b[:]); got != want {
		return fmt.Errorf("checksum mismatch: stored %08x, computed %08x", got, want)
	}
	return nil
}
