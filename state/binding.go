package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/weirstream/weir/barrier"
)

// FileOwner names the task and operator a state file belongs to. With the
// job ID and the checkpoint ID it makes up the binding header that storage
// writes at the start of every state and channel-state file, and that
// verification (Storage.Latest, OpenSavepoint, a restore) compares with
// where the metadata says the file belongs:
//
//	header = "WEIRFILE" version:u8 bodyLen:uvarint body crc:u32le   (crc32c of everything before it)
//	body   = jobID:string checkpoint:uvarint vertex:string subtask:uvarint operator:string
//
// (strings are uvarint(len) | bytes). A channel state file's Operator is
// empty; a shared file of an incremental snapshot names the checkpoint it
// was uploaded for. Readers of a state file (StateFile) see only the bytes
// after the header, so file formats and offsets do not include it. A file
// written without an owner (a storage's own CreateStateWriter, as tools
// and tests do; the runtime always names one) is bound to its job and
// checkpoint only.
type FileOwner struct {
	Vertex   string
	Subtask  int
	Operator string
}

func (o FileOwner) String() string {
	if o.Operator == "" {
		return fmt.Sprintf("task %s/%d", o.Vertex, o.Subtask)
	}
	return fmt.Sprintf("task %s/%d operator %s", o.Vertex, o.Subtask, o.Operator)
}

// FileBinding is the content of a state file's binding header.
type FileBinding struct {
	JobID      string
	Checkpoint barrier.CheckpointID
	Owner      FileOwner
}

func (b FileBinding) String() string {
	job := b.JobID
	if job == "" {
		job = "(none)"
	}
	return fmt.Sprintf("checkpoint %d of job %s, %s", b.Checkpoint, job, b.Owner)
}

var fileMagic = []byte("WEIRFILE")

const (
	fileHeaderVersion = 1
	// maxFileHeaderBody bounds a header's body (IDs and names).
	maxFileHeaderBody = 16 << 10
)

// AppendFileHeader appends the binding header of b.
func AppendFileHeader(dst []byte, b FileBinding) ([]byte, error) {
	body := appendString(nil, b.JobID)
	body = binary.AppendUvarint(body, uint64(b.Checkpoint))
	body = appendString(body, b.Owner.Vertex)
	body = binary.AppendUvarint(body, uint64(b.Owner.Subtask))
	body = appendString(body, b.Owner.Operator)
	if len(body) > maxFileHeaderBody {
		return nil, fmt.Errorf("state: file header of %s too long (%d bytes)", b, len(body))
	}
	start := len(dst)
	dst = append(dst, fileMagic...)
	dst = append(dst, fileHeaderVersion)
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	dst = append(dst, body...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), nil
}

// errNoHeader reports a file without a well-formed binding header.
var errNoHeader = errors.New("no valid file header")

// ReadFileHeader reads the binding header at the start of r (a file of
// size bytes) and returns it and its length.
func ReadFileHeader(r io.ReaderAt, size int64) (FileBinding, int64, error) {
	const prefix = 8 + 1 + binary.MaxVarintLen64
	buf := make([]byte, min(size, prefix))
	if _, err := r.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return FileBinding{}, 0, err
	}
	if len(buf) < len(fileMagic)+2 || string(buf[:len(fileMagic)]) != string(fileMagic) {
		return FileBinding{}, 0, fmt.Errorf("%w (bad magic or too short)", errNoHeader)
	}
	if v := buf[len(fileMagic)]; v != fileHeaderVersion {
		return FileBinding{}, 0, fmt.Errorf("%w: version %d", errNoHeader, v)
	}
	n, k := binary.Uvarint(buf[len(fileMagic)+1:])
	if k <= 0 || n > maxFileHeaderBody {
		return FileBinding{}, 0, fmt.Errorf("%w: bad length", errNoHeader)
	}
	total := int64(len(fileMagic)+1+k) + int64(n) + 4
	if total > size {
		return FileBinding{}, 0, fmt.Errorf("%w: truncated", errNoHeader)
	}
	hdr := make([]byte, total)
	if _, err := r.ReadAt(hdr, 0); err != nil && !(errors.Is(err, io.EOF) && int64(len(hdr)) == total) {
		return FileBinding{}, 0, err
	}
	if got, want := crc32.Checksum(hdr[:total-4], castagnoli), binary.LittleEndian.Uint32(hdr[total-4:]); got != want {
		return FileBinding{}, 0, fmt.Errorf("%w: checksum %08x, expected %08x", errNoHeader, got, want)
	}
	d := decoder{b: hdr[len(fileMagic)+1+k : total-4], version: metaVersion}
	var b FileBinding
	b.JobID = d.string()
	b.Checkpoint = barrier.CheckpointID(d.uvarint())
	b.Owner.Vertex = d.string()
	b.Owner.Subtask = int(d.uvarint())
	b.Owner.Operator = d.string()
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return FileBinding{}, 0, fmt.Errorf("%w: %w", errNoHeader, d.err)
	}
	return b, total, nil
}

// boundHandle is a state file of a checkpoint with where its metadata says
// it belongs.
type boundHandle struct {
	StreamHandle
	owner  FileOwner
	shared bool // a shared file of an incremental snapshot: uploaded for this or an earlier checkpoint
}

// boundHandles lists every state file of m with its owner, in the order
// of StreamHandles.
func (m Metadata) boundHandles() []boundHandle {
	var hs []boundHandle
	for _, k := range m.sortedTaskKeys() {
		ts := m.Tasks[k]
		if ts.Channels != nil {
			hs = append(hs, boundHandle{StreamHandle: ts.Channels.StreamHandle, owner: FileOwner{Vertex: k.Vertex, Subtask: k.Subtask}})
		}
		for _, op := range sortedKeys(ts.Operators) {
			st := ts.Operators[op]
			o := FileOwner{Vertex: k.Vertex, Subtask: k.Subtask, Operator: op}
			if kh := st.Keyed; kh != nil && kh.Incremental == nil {
				hs = append(hs, boundHandle{StreamHandle: kh.StreamHandle, owner: o})
			}
			if kh := st.Keyed; kh != nil && kh.Incremental != nil {
				for _, f := range kh.Incremental.Shared {
					hs = append(hs, boundHandle{StreamHandle: f.StreamHandle, owner: o, shared: true})
				}
				for _, f := range kh.Incremental.Private {
					hs = append(hs, boundHandle{StreamHandle: f.StreamHandle, owner: o})
				}
			}
			if st.Operator != nil {
				hs = append(hs, boundHandle{StreamHandle: st.Operator.StreamHandle, owner: o})
			}
		}
	}
	return hs
}

// checkBinding compares the binding header b of the file of h with where
// checkpoint m's metadata says the file belongs.
func checkBinding(m Metadata, h boundHandle, b FileBinding) error {
	want := FileBinding{JobID: m.JobID, Checkpoint: m.ID, Owner: h.owner}
	ok := b.JobID == want.JobID && (b.Owner == want.Owner || b.Owner == FileOwner{})
	if h.shared {
		ok = ok && b.Checkpoint > 0 && b.Checkpoint <= m.ID
	} else {
		ok = ok && b.Checkpoint == m.ID
	}
	if ok {
		return nil
	}
	what := want.String()
	if h.shared {
		what = fmt.Sprintf("checkpoint %d or earlier of job %s, %s", m.ID, want.JobID, want.Owner)
	}
	return &CorruptError{Path: h.Path, Reason: fmt.Sprintf("the file belongs to %s, expected %s", b, what)}
}
