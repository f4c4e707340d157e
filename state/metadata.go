package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
)

// The metadata file format (version 7). Integers are uvarints unless noted;
// strings are uvarint(len) | bytes; maps are written sorted by key so equal
// metadata encodes to equal bytes.
//
//	file      = "WEIRMETA" version:u16le body crc:u32le        (crc32c of everything before it)
//	body      = id timestamp:zigzag-varint kind:u8 jobID:string nTasks task*
//	task      = vertex:string subtask snapshot
//	snapshot  = tflags:u8 [channels] nOps op*    (tflags bit0 finished, bit1 channels, bit2 inputs)
//	channels  = stream nInputs nOutputs nSubs* [nEdges nChannels*]   (the last part if tflags bit2)
//	op        = operatorID:string flags:u8 [keyed] [operator] [incr] [info]
//	            (flags bit0 keyed, bit1 operator, bit2 incremental keyed, bit3 info,
//	            bit4 finished)
//	keyed     = stream start end nOffsets offset*
//	operator  = stream nStates (name:string distribution:u8 nOffsets offset*)*
//	incr      = backend:string nShared file* nPrivate file*
//	file      = name:string stream
//	stream    = path:string size sflags:u8 checksum:u64le   (sflags bit0: StreamHandle.Legacy)
//	info      = name:string kind:string nSchemas schema*     (the operator's name and kind, its states' schemas)
//	schema    = name:string kind:string ttl:u8 codec:identity userKey:identity
//	identity  = name:string version:string
//
// Version 7 has version 6's grammar. An operator's kind is its
// implementation ("source", "split source", "generator source", "map",
// "reduce", "two-phase-commit sink"), never a name the user gave; version
// 6 recorded the name a source was created with (FromReader's name, a
// file's, a Kafka source's topics) as its kind, which a restore therefore
// does not compare with a source's kind now (Metadata.Version says the
// file is version 6). A two-phase-commit sink records its transactions
// under the identity of its transaction codec ("2pc-transaction(…)");
// version 6 recorded them as a list of "bytes", which reads as not
// recorded.
//
// Version 6 adds an operator's kind to its info (the kind of operator the
// API made: "reduce", "window aggregate"; a restore refuses to hand its
// state to an operator of another kind) and its finished flag
// (flags bit4: the operator had finished in this subtask, FLIP-147; it
// then holds no state). A task that had finished lists its operators,
// each finished, so that a restore finds them finished by operator
// wherever they now run. Version 5 recorded the schema of weir's own
// operator list states as lists of "bytes", which says nothing of their
// contents: those schemas (of any operator list of bytes) read as not
// recorded.
//
// Version 5 adds the operator info (flags bit3): the name of the operator,
// for the errors of a restore that lacks it, and the schema (kind and
// codec identities, see StateSchema) of each of its states, checked when a
// restored operator registers them. Within version 5, tflags bit2 adds
// the channels of each input edge of the task to its channel state
// (ChannelStateHandle.Inputs); a file without it restores checking
// only the total. Version 4 records the job ID and 64-bit content checksums (XXH64 of the
// whole state file, its binding header included: see FileOwner), and the
// id must equal the N of the chk-N directory the file lies in.
//
// Earlier versions, all still read: version 3 (incremental keyed state,
// flags bit2) is version 4 without jobID, with stream = path:string size
// crc32c:u32le (the CRC32C of a file without a binding header: decoded as
// Legacy handles); version 2 is version 3 without incremental state;
// version 1 (weir before unaligned checkpoints and finished tasks) is
// version 2 without tflags and channels. A checkpoint of an earlier
// version restores as it did (version 4 and older: without schema checks,
// and errors name operators by ID only; version 5 and older: without the
// operators' kinds, and finished tasks found by vertex); a job restored
// from it writes version 7.
//
// The task snapshot format (EncodeTaskSnapshot; same versions) frames one
// snapshot of the same grammar the same way:
//
//	file      = "WEIRSNAP" version:u16le snapshot crc:u32le

var (
	metaMagic = []byte("WEIRMETA")
	snapMagic = []byte("WEIRSNAP")
)

const (
	metaVersion = 7
	snapVersion = 7
	// oldestVersion is the oldest metadata and snapshot version read.
	oldestVersion = 1
)

// ErrCorruptSnapshot is wrapped by every error of DecodeTaskSnapshot.
var ErrCorruptSnapshot = errors.New("state: corrupt task snapshot")

// EncodeTaskSnapshot encodes ts in the versioned binary task snapshot
// format: the metadata format's encoding of one task's snapshot, with its
// own magic, version and checksum. Equal snapshots encode to equal bytes.
func EncodeTaskSnapshot(ts TaskSnapshot) []byte {
	b := append([]byte(nil), snapMagic...)
	b = binary.LittleEndian.AppendUint16(b, snapVersion)
	b = appendSnapshot(b, ts)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// DecodeTaskSnapshot decodes and verifies an encoded TaskSnapshot. Empty
// collections decode as in DecodeMetadata: Operators and States as empty
// maps, Offsets as nil. Errors wrap ErrCorruptSnapshot.
func DecodeTaskSnapshot(b []byte) (TaskSnapshot, error) {
	body, v, err := openFrame(b, snapMagic, snapVersion, "task snapshot")
	if err != nil {
		return TaskSnapshot{}, fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
	}
	d := decoder{b: body, version: v}
	ts := d.snapshot()
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return TaskSnapshot{}, fmt.Errorf("%w: %w", ErrCorruptSnapshot, d.err)
	}
	return ts, nil
}

// openFrame checks the magic, checksum and version (oldestVersion to
// version) of an encoded file and returns what lies between the version
// and the checksum, and the version.
func openFrame(b, magic []byte, version uint16, what string) ([]byte, uint16, error) {
	if len(b) < len(magic)+2+4 || string(b[:len(magic)]) != string(magic) {
		return nil, 0, fmt.Errorf("not a weir %s file (bad magic or too short)", what)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, 0, fmt.Errorf("checksum %08x, expected %08x", got, sum)
	}
	v := binary.LittleEndian.Uint16(body[len(magic):])
	if v < oldestVersion || v > version {
		return nil, 0, fmt.Errorf("unsupported %s version %d (this weir reads versions %d to %d)", what, v, oldestVersion, version)
	}
	return body[len(magic)+2:], v, nil
}

// EncodeMetadata encodes m in the versioned binary metadata format.
func EncodeMetadata(m Metadata) []byte {
	b := append([]byte(nil), metaMagic...)
	b = binary.LittleEndian.AppendUint16(b, metaVersion)
	b = binary.AppendUvarint(b, uint64(m.ID))
	b = binary.AppendVarint(b, m.Timestamp)
	b = append(b, byte(m.Kind))
	b = appendString(b, m.JobID)
	keys := m.sortedTaskKeys()
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k.Vertex)
		b = binary.AppendUvarint(b, uint64(k.Subtask))
		b = appendSnapshot(b, m.Tasks[k])
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// appendSnapshot appends the snapshot production: the task flags, the
// channel state, the operators sorted by ID.
func appendSnapshot(b []byte, ts TaskSnapshot) []byte {
	var tflags byte
	if ts.Finished {
		tflags |= 1
	}
	if ts.Channels != nil {
		tflags |= 2
		if ts.Channels.Inputs != nil {
			tflags |= 4
		}
	}
	b = append(b, tflags)
	if c := ts.Channels; c != nil {
		b = appendStream(b, c.StreamHandle)
		b = binary.AppendUvarint(b, uint64(c.InputChannels))
		b = binary.AppendUvarint(b, uint64(len(c.Subpartitions)))
		for _, n := range c.Subpartitions {
			b = binary.AppendUvarint(b, uint64(n))
		}
		if c.Inputs != nil {
			b = binary.AppendUvarint(b, uint64(len(c.Inputs)))
			for _, n := range c.Inputs {
				b = binary.AppendUvarint(b, uint64(n))
			}
		}
	}
	ops := sortedKeys(ts.Operators)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, op := range ops {
		st := ts.Operators[op]
		b = appendString(b, op)
		var flags byte
		if st.Keyed != nil {
			flags |= 1
		}
		if st.Operator != nil {
			flags |= 2
		}
		if st.Keyed != nil && st.Keyed.Incremental != nil {
			flags |= 4
		}
		if st.Name != "" || st.Kind != "" || len(st.Schemas) > 0 {
			flags |= 8
		}
		if st.Finished {
			flags |= 16
		}
		b = append(b, flags)
		if k := st.Keyed; k != nil {
			b = appendStream(b, k.StreamHandle)
			b = binary.AppendUvarint(b, uint64(k.KeyGroups.Start))
			b = binary.AppendUvarint(b, uint64(k.KeyGroups.End))
			b = appendOffsets(b, k.Offsets)
		}
		if o := st.Operator; o != nil {
			b = appendStream(b, o.StreamHandle)
			names := sortedKeys(o.States)
			b = binary.AppendUvarint(b, uint64(len(names)))
			for _, n := range names {
				b = appendString(b, n)
				b = append(b, byte(o.States[n].Distribution))
				b = appendOffsets(b, o.States[n].Offsets)
			}
		}
		if st.Keyed != nil && st.Keyed.Incremental != nil {
			inc := st.Keyed.Incremental
			b = appendString(b, inc.Backend)
			for _, fs := range [][]NamedHandle{inc.Shared, inc.Private} {
				b = binary.AppendUvarint(b, uint64(len(fs)))
				for _, f := range fs {
					b = appendString(b, f.Name)
					b = appendStream(b, f.StreamHandle)
				}
			}
		}
		if flags&8 != 0 {
			b = appendString(b, st.Name)
			b = appendString(b, st.Kind)
			b = binary.AppendUvarint(b, uint64(len(st.Schemas)))
			for _, sc := range st.Schemas {
				b = appendString(b, sc.Name)
				b = appendString(b, sc.Kind)
				var ttl byte
				if sc.TTL {
					ttl = 1
				}
				b = append(b, ttl)
				for _, id := range []codec.Identity{sc.Codec, sc.UserKey} {
					b = appendString(b, id.Name)
					b = appendString(b, id.Version)
				}
			}
		}
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStream(b []byte, h StreamHandle) []byte {
	b = appendString(b, h.Path)
	b = binary.AppendUvarint(b, uint64(h.Size))
	var flags byte
	if h.Legacy {
		flags |= 1
	}
	b = append(b, flags)
	return binary.LittleEndian.AppendUint64(b, h.Checksum)
}

// sortedTaskKeys returns the keys of m.Tasks by vertex, then subtask.
func (m Metadata) sortedTaskKeys() []TaskKey {
	keys := make([]TaskKey, 0, len(m.Tasks))
	for k := range m.Tasks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Vertex != keys[j].Vertex {
			return keys[i].Vertex < keys[j].Vertex
		}
		return keys[i].Subtask < keys[j].Subtask
	})
	return keys
}

func appendOffsets(b []byte, offs []int64) []byte {
	b = binary.AppendUvarint(b, uint64(len(offs)))
	for _, o := range offs {
		b = binary.AppendUvarint(b, uint64(o))
	}
	return b
}

// DecodeMetadata decodes and verifies an encoded Metadata.
func DecodeMetadata(b []byte) (Metadata, error) {
	body, v, err := openFrame(b, metaMagic, metaVersion, "metadata")
	if err != nil {
		return Metadata{}, err
	}
	d := decoder{b: body, version: v}
	var m Metadata
	m.ID = barrier.CheckpointID(d.uvarint())
	m.Timestamp = d.varint()
	m.Kind = barrier.Kind(d.byte())
	if v >= 4 {
		m.JobID = d.string()
	}
	n := d.count()
	m.Tasks = make(map[TaskKey]TaskSnapshot, n)
	for range n {
		k := TaskKey{Vertex: d.string()}
		k.Subtask = int(d.uvarint())
		ts := d.snapshot()
		if d.err != nil {
			break
		}
		m.Tasks[k] = ts
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return Metadata{}, d.err
	}
	if v < metaVersion {
		m.Version = v
	}
	return m, nil
}

type decoder struct {
	b       []byte
	err     error
	version uint16 // of the file being decoded
}

var errShort = errors.New("truncated")

// snapshot decodes the snapshot production (appendSnapshot); on an error
// it returns what it decoded so far.
func (d *decoder) snapshot() TaskSnapshot {
	var ts TaskSnapshot
	if d.version >= 2 {
		tflags := d.byte()
		known := byte(3)
		if d.version >= 5 {
			known = 7
		}
		if tflags&^known != 0 && d.err == nil {
			d.err = fmt.Errorf("unknown task flags %#x", tflags)
		}
		if tflags&4 != 0 && tflags&2 == 0 && d.err == nil {
			d.err = fmt.Errorf("task flags %#x: inputs without channel state", tflags)
		}
		ts.Finished = tflags&1 != 0
		if tflags&2 != 0 {
			c := &ChannelStateHandle{StreamHandle: d.stream()}
			c.InputChannels = d.channels()
			if n := d.count(); n > 0 {
				c.Subpartitions = make([]int, n)
				for i := range c.Subpartitions {
					c.Subpartitions[i] = int(d.uvarint())
				}
			}
			if tflags&4 != 0 {
				c.Inputs = make([]int, d.count())
				left := uint64(c.InputChannels)
				for i := range c.Inputs {
					n := d.uvarint()
					if n > left && d.err == nil {
						d.err = fmt.Errorf("channel state: the inputs have more channels than its %d", c.InputChannels)
					}
					if d.err != nil {
						break
					}
					c.Inputs[i], left = int(n), left-n
				}
				if left != 0 && d.err == nil {
					d.err = fmt.Errorf("channel state: the inputs have %v channels, not %d", c.Inputs, c.InputChannels)
				}
			}
			ts.Channels = c
		}
	}
	nops := d.count()
	ts.Operators = make(map[string]OperatorSubtaskState, nops)
	for range nops {
		op := d.string()
		flags := d.byte()
		known := byte(3)
		switch {
		case d.version >= 6:
			known = 31
		case d.version >= 5:
			known = 15
		case d.version >= 3:
			known = 7
		}
		if (flags&^known != 0 || flags&5 == 4) && d.err == nil {
			d.err = fmt.Errorf("operator %q: unknown flags %#x", op, flags)
		}
		st := OperatorSubtaskState{Finished: flags&16 != 0}
		if flags&1 != 0 {
			k := &KeyedStateHandle{StreamHandle: d.stream()}
			k.KeyGroups = keygroup.Range{Start: int(d.uvarint()), End: int(d.uvarint())}
			k.Offsets = d.offsets()
			st.Keyed = k
		}
		if flags&2 != 0 {
			o := &OperatorStateHandle{StreamHandle: d.stream()}
			ns := d.count()
			o.States = make(map[string]OperatorStateMeta, ns)
			for range ns {
				name := d.string()
				o.States[name] = OperatorStateMeta{Distribution: Distribution(d.byte()), Offsets: d.offsets()}
			}
			st.Operator = o
		}
		if flags&4 != 0 && st.Keyed != nil {
			inc := &IncrementalHandle{Backend: d.string()}
			inc.Shared = d.files()
			inc.Private = d.files()
			st.Keyed.Incremental = inc
		}
		if flags&8 != 0 {
			st.Name = d.string()
			if d.version >= 6 {
				st.Kind = d.string()
			}
			for n := d.count(); n > 0 && d.err == nil; n-- {
				var sc StateSchema
				sc.Name, sc.Kind = d.string(), d.string()
				sc.TTL = d.byte() != 0
				sc.Codec = codec.Identity{Name: d.string(), Version: d.string()}
				sc.UserKey = codec.Identity{Name: d.string(), Version: d.string()}
				if sc.operatorState() && sc.Codec == (codec.Identity{Name: "bytes"}) &&
					(d.version < 6 || d.version == 6 && sc.Name == "2pc-transactions") {
					continue // says nothing of the contents (see versions 6 and 7)
				}
				st.Schemas = append(st.Schemas, sc)
			}
		}
		if d.err != nil {
			break
		}
		ts.Operators[op] = st
	}
	return ts
}

func (d *decoder) files() []NamedHandle {
	n := d.count()
	if n == 0 {
		return nil
	}
	fs := make([]NamedHandle, 0, n)
	for range n {
		name := d.string()
		fs = append(fs, NamedHandle{Name: name, StreamHandle: d.stream()})
		if d.err != nil {
			return nil
		}
	}
	return fs
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length that must be plausible for the remaining bytes.
func (d *decoder) count() int {
	v := d.uvarint()
	if v > uint64(len(d.b)) {
		if d.err == nil {
			d.err = errShort
		}
		return 0
	}
	return int(v)
}

// maxChannels bounds the channel counts of a channel state handle: they
// count channels, not bytes that follow, so count's bound does not apply.
const maxChannels = 1 << 24

// channels decodes a channel count.
func (d *decoder) channels() int {
	v := d.uvarint()
	if v > maxChannels && d.err == nil {
		d.err = fmt.Errorf("channel state of %d input channels", v)
	}
	if d.err != nil {
		return 0
	}
	return int(v)
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = cmpErr(d.err, errShort)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (d *decoder) string() string {
	n := d.count()
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) stream() StreamHandle {
	h := StreamHandle{Path: d.string(), Size: int64(d.uvarint())}
	if d.version < 4 {
		if d.err != nil || len(d.b) < 4 {
			d.err = cmpErr(d.err, errShort)
			return h
		}
		h.Checksum, h.Legacy = uint64(binary.LittleEndian.Uint32(d.b)), true
		d.b = d.b[4:]
		return h
	}
	flags := d.byte()
	if d.err != nil || len(d.b) < 8 {
		d.err = cmpErr(d.err, errShort)
		return h
	}
	if flags&^1 != 0 {
		d.err = fmt.Errorf("unknown stream flags %#x", flags)
		return h
	}
	h.Legacy = flags&1 != 0
	h.Checksum = binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return h
}

func (d *decoder) offsets() []int64 {
	n := d.count()
	if n == 0 {
		return nil
	}
	offs := make([]int64, n)
	for i := range offs {
		offs[i] = int64(d.uvarint())
	}
	return offs
}

// Clone returns a deep copy of m.
func (m Metadata) Clone() Metadata {
	out := m
	out.Tasks = make(map[TaskKey]TaskSnapshot, len(m.Tasks))
	for k, ts := range m.Tasks {
		nts := TaskSnapshot{Operators: make(map[string]OperatorSubtaskState, len(ts.Operators)), Finished: ts.Finished}
		if ts.Channels != nil {
			c := *ts.Channels
			c.Subpartitions = slices.Clone(c.Subpartitions)
			c.Inputs = slices.Clone(c.Inputs)
			nts.Channels = &c
		}
		for op, st := range ts.Operators {
			n := OperatorSubtaskState{Name: st.Name, Kind: st.Kind, Finished: st.Finished, Schemas: slices.Clone(st.Schemas)}
			if st.Keyed != nil {
				kh := *st.Keyed
				kh.Offsets = slices.Clone(kh.Offsets)
				if inc := kh.Incremental; inc != nil {
					kh.Incremental = &IncrementalHandle{Backend: inc.Backend,
						Shared: slices.Clone(inc.Shared), Private: slices.Clone(inc.Private)}
				}
				n.Keyed = &kh
			}
			if st.Operator != nil {
				oh := *st.Operator
				oh.States = make(map[string]OperatorStateMeta, len(st.Operator.States))
				for name, sm := range st.Operator.States {
					sm.Offsets = slices.Clone(sm.Offsets)
					oh.States[name] = sm
				}
				n.Operator = &oh
			}
			nts.Operators[op] = n
		}
		out.Tasks[k] = nts
	}
	return out
}

// rewriteHandles calls fn on every stream handle of m, in a deterministic
// order, letting it modify the handle in place.
func (m Metadata) rewriteHandles(fn func(*StreamHandle)) {
	for _, k := range m.sortedTaskKeys() {
		ts := m.Tasks[k]
		if ts.Channels != nil {
			fn(&ts.Channels.StreamHandle)
		}
		for _, op := range sortedKeys(ts.Operators) {
			st := ts.Operators[op]
			if k := st.Keyed; k != nil && k.Incremental == nil {
				fn(&k.StreamHandle)
			}
			if k := st.Keyed; k != nil && k.Incremental != nil {
				for i := range k.Incremental.Shared {
					fn(&k.Incremental.Shared[i].StreamHandle)
				}
				for i := range k.Incremental.Private {
					fn(&k.Incremental.Private[i].StreamHandle)
				}
			}
			if st.Operator != nil {
				fn(&st.Operator.StreamHandle)
			}
		}
	}
}

// StreamHandles lists every state file m refers to.
func (m Metadata) StreamHandles() []StreamHandle {
	var hs []StreamHandle
	m.Clone().rewriteHandles(func(h *StreamHandle) { hs = append(hs, *h) })
	return hs
}

// sharedHandles lists the shared files of m's incremental snapshots.
func (m Metadata) sharedHandles() []StreamHandle {
	var hs []StreamHandle
	for _, ts := range m.Tasks {
		for _, st := range ts.Operators {
			if st.Keyed != nil && st.Keyed.Incremental != nil {
				for _, f := range st.Keyed.Incremental.Shared {
					hs = append(hs, f.StreamHandle)
				}
			}
		}
	}
	return hs
}

// SharedHandles lists the shared files of m's incremental snapshots: the
// files a storage reference-counts across checkpoints (see FileStorage).
func (m Metadata) SharedHandles() []StreamHandle { return m.sharedHandles() }

// WithHandles returns a copy of m whose stream handles are those fn
// returns for m's, visited in a deterministic order: a storage that copies
// a checkpoint's files elsewhere (a savepoint) rewrites their paths with
// it.
func (m Metadata) WithHandles(fn func(StreamHandle) StreamHandle) Metadata {
	out := m.Clone()
	out.rewriteHandles(func(h *StreamHandle) { *h = fn(*h) })
	return out
}
