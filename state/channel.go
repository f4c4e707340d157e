package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/weirstream/weir/barrier"
)

// InFlight is one item of a channel's in-flight data at an unaligned
// checkpoint: the bytes of a data buffer (serialized records; the first
// and last may be parts of records that span buffers), or the payload of
// an event (a watermark or a watermark status) that travelled between
// them.
type InFlight struct {
	Event bool
	Bytes []byte
}

// ChannelState is the channel state of one task at an unaligned
// checkpoint: the data in flight on each of its input channels, up to
// each channel's barrier (recorded by the consumer), and in each
// subpartition of its outputs, overtaken by the task's own barrier
// (recorded by the producer). Restoring it feeds each input channel's
// items to the task before anything new arrives on that channel, and
// puts each subpartition's items ahead of anything the task produces.
type ChannelState struct {
	// Inputs are indexed by input channel; a task without inputs has none.
	Inputs [][]InFlight
	// Outputs are indexed by output partition, then by subpartition.
	Outputs [][][]InFlight
}

// Empty reports whether cs holds no item.
func (cs ChannelState) Empty() bool {
	for _, in := range cs.Inputs {
		if len(in) > 0 {
			return false
		}
	}
	for _, p := range cs.Outputs {
		for _, s := range p {
			if len(s) > 0 {
				return false
			}
		}
	}
	return true
}

// ChannelStateHandle locates a task's channel state file and says the
// shape it was written for, so that a restore can tell a changed
// topology without reading the file.
type ChannelStateHandle struct {
	StreamHandle
	// InputChannels is the number of input channels of the task's gate.
	InputChannels int
	// Inputs is the number of channels of each input edge of the task's
	// chain head, in the gate's order (each input of a two-input
	// operator, each stream of a union): they add up to InputChannels,
	// and tell a restore that would hand a channel's data to another
	// input than the one it was recorded for. Nil in a handle written
	// before weir recorded it: only the total is known.
	Inputs []int
	// Subpartitions is the number of subpartitions of each output
	// partition.
	Subpartitions []int
}

// The channel state file format (version 2). Integers are uvarints.
//
//	file    = "WEIRCHST" version:u16le nInputs channel* nOutputs output*
//	output  = nSubs channel*
//	channel = nItems item*
//	item    = kind:u8 (0 data, 1 event) len bytes
//
// The file's CRC32C is in its StreamHandle, checked when it is opened.
// The data items are buffers as they travel, so the file's version also
// names the record format within them: since version 2, a keyed edge to
// several subtasks puts each record's key group before it. A version 1
// file is refused rather than misread.
var chanMagic = []byte("WEIRCHST")

const chanVersion = 2

// ErrCorruptChannelState is wrapped by the errors of ReadChannelState for
// a file whose content does not parse.
var ErrCorruptChannelState = errors.New("state: corrupt channel state")

// AppendChannelState appends the encoding of cs.
func AppendChannelState(b []byte, cs ChannelState) []byte {
	b = append(b, chanMagic...)
	b = binary.LittleEndian.AppendUint16(b, chanVersion)
	b = binary.AppendUvarint(b, uint64(len(cs.Inputs)))
	for _, ch := range cs.Inputs {
		b = appendItems(b, ch)
	}
	b = binary.AppendUvarint(b, uint64(len(cs.Outputs)))
	for _, p := range cs.Outputs {
		b = binary.AppendUvarint(b, uint64(len(p)))
		for _, ch := range p {
			b = appendItems(b, ch)
		}
	}
	return b
}

func appendItems(b []byte, items []InFlight) []byte {
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		k := byte(0)
		if it.Event {
			k = 1
		}
		b = append(b, k)
		b = binary.AppendUvarint(b, uint64(len(it.Bytes)))
		b = append(b, it.Bytes...)
	}
	return b
}

// DecodeChannelState decodes a channel state file's content. Errors wrap
// ErrCorruptChannelState.
func DecodeChannelState(b []byte) (ChannelState, error) {
	fail := func(err error) (ChannelState, error) {
		return ChannelState{}, fmt.Errorf("%w: %w", ErrCorruptChannelState, err)
	}
	if len(b) < len(chanMagic)+2 || string(b[:len(chanMagic)]) != string(chanMagic) {
		return fail(errors.New("not a channel state file (bad magic or too short)"))
	}
	if v := binary.LittleEndian.Uint16(b[len(chanMagic):]); v != chanVersion {
		return fail(fmt.Errorf("unsupported channel state version %d", v))
	}
	d := decoder{b: b[len(chanMagic)+2:]}
	var cs ChannelState
	n := d.count()
	cs.Inputs = make([][]InFlight, n)
	for i := range cs.Inputs {
		cs.Inputs[i] = d.items()
	}
	n = d.count()
	cs.Outputs = make([][][]InFlight, n)
	for i := range cs.Outputs {
		subs := d.count()
		cs.Outputs[i] = make([][]InFlight, subs)
		for j := range cs.Outputs[i] {
			cs.Outputs[i][j] = d.items()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fail(d.err)
	}
	return cs, nil
}

func (d *decoder) items() []InFlight {
	n := d.count()
	if n == 0 {
		return nil
	}
	items := make([]InFlight, 0, n)
	for range n {
		k := d.byte()
		if k > 1 && d.err == nil {
			d.err = fmt.Errorf("unknown item kind %d", k)
		}
		l := d.count()
		if d.err != nil {
			return nil
		}
		items = append(items, InFlight{Event: k == 1, Bytes: d.b[:l:l]})
		d.b = d.b[l:]
	}
	return items
}

// WriteChannelState writes cs as state file name of checkpoint id and
// returns its handle.
func WriteChannelState(f StateWriterFactory, id barrier.CheckpointID, name string, cs ChannelState) (*ChannelStateHandle, error) {
	w, err := f.CreateStateWriter(id, name)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(AppendChannelState(nil, cs)); err != nil {
		_ = w.Abort()
		return nil, err
	}
	sh, err := w.Close()
	if err != nil {
		_ = w.Abort()
		return nil, err
	}
	h := &ChannelStateHandle{StreamHandle: sh, InputChannels: len(cs.Inputs)}
	for _, p := range cs.Outputs {
		h.Subpartitions = append(h.Subpartitions, len(p))
	}
	return h, nil
}

// ReadChannelState reads and decodes the channel state file of h through
// r (which verifies its checksum: a damaged file is a *CorruptError).
func ReadChannelState(r StateReader, h ChannelStateHandle) (ChannelState, error) {
	f, err := r.OpenState(h.StreamHandle)
	if err != nil {
		return ChannelState{}, err
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return ChannelState{}, fmt.Errorf("state: read %s: %w", h.Path, err)
	}
	cs, err := DecodeChannelState(b)
	if err != nil {
		return ChannelState{}, &CorruptError{Path: h.Path, Reason: "channel state", Err: err}
	}
	if len(cs.Inputs) != h.InputChannels || len(cs.Outputs) != len(h.Subpartitions) {
		return ChannelState{}, &CorruptError{Path: h.Path, Reason: "channel state does not match its handle"}
	}
	for i, p := range cs.Outputs {
		if len(p) != h.Subpartitions[i] {
			return ChannelState{}, &CorruptError{Path: h.Path, Reason: "channel state does not match its handle"}
		}
	}
	return cs, nil
}
