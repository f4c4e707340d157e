package nats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// A source subtask's position, as checkpointed: version 2, then whether
// the subtask had started (resolved where its splits start), the creation
// time of the stream its sequences are of (8, Unix nanoseconds; 0 for
// unknown), the number of splits, and per split: subject filter (2-byte
// length, bytes; empty for the whole stream), next stream sequence (8),
// last sequence to read (8, all ones for none); big endian, in
// configuration order. Version 1 had no creation time.
const positionVersion = 2

// ReaderIdentity (weir.ReaderIdentifier) is "nats stream <name>": a
// position's sequence numbers are of the stream read, so a source
// restored onto another stream (or another kind of reader under its UID)
// is refused at restore. Its subject filters are in the position.
func (r *reader[T]) ReaderIdentity() string { return "nats stream " + r.cfg.Stream }

func (r *reader[T]) Position() ([]byte, error) {
	var ss []*split
	if r.started {
		ss = r.owned
	} else {
		for _, s := range r.restored {
			ss = append(ss, s)
		}
	}
	created := r.restoredCreated
	if r.started {
		created = r.created
	}
	pos := encodePosition(ss, r.started || r.restoredStarted, created)
	if r.lastMsg != nil {
		if len(r.acks) == maxPendingAcks {
			// The oldest go; a later acknowledgement covers them (AckAll),
			// or they are acknowledged with the next one (explicit).
			r.acks[1].msgs = append(r.acks[0].msgs, r.acks[1].msgs...)
			r.acks = append(r.acks[:0], r.acks[1:]...)
		}
		r.acks = append(r.acks, pendingAck{pos: pos, msg: r.lastMsg, msgs: r.delivered})
		r.delivered = nil
	}
	return pos, nil
}

func encodePosition(ss []*split, started bool, created int64) []byte {
	b := []byte{positionVersion, 0}
	if started {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, uint64(created))
	b = binary.BigEndian.AppendUint32(b, uint32(len(ss)))
	for _, s := range ss {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s.filter)))
		b = append(b, s.filter...)
		b = binary.BigEndian.AppendUint64(b, s.next)
		b = binary.BigEndian.AppendUint64(b, s.stop)
	}
	return b
}

var errCorruptPosition = errors.New("nats: corrupt source position")

func decodePosition(b []byte) (ss []*split, started bool, created int64, err error) {
	if len(b) < 2 || (b[0] != 1 && b[0] != positionVersion) || b[1] > 1 {
		return nil, false, 0, errCorruptPosition
	}
	started = b[1] == 1
	if b[0] == positionVersion {
		if len(b) < 10 {
			return nil, false, 0, errCorruptPosition
		}
		created = int64(binary.BigEndian.Uint64(b[2:]))
		b = b[8:]
	}
	if len(b) < 6 {
		return nil, false, 0, errCorruptPosition
	}
	n := binary.BigEndian.Uint32(b[2:])
	b = b[6:]
	for range n {
		if len(b) < 2 {
			return nil, false, 0, errCorruptPosition
		}
		l := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+l+16 {
			return nil, false, 0, errCorruptPosition
		}
		s := &split{filter: string(b[2 : 2+l])}
		s.next = binary.BigEndian.Uint64(b[2+l:])
		s.stop = binary.BigEndian.Uint64(b[10+l:])
		if s.next == 0 || (s.filter != "" && !validSubject(s.filter)) {
			return nil, false, 0, errCorruptPosition
		}
		ss = append(ss, s)
		b = b[18+l:]
	}
	if len(b) != 0 {
		return nil, false, 0, errCorruptPosition
	}
	return ss, started, created, nil
}

// Seek restores the subtask's own position (same parallelism).
func (r *reader[T]) Seek(pos []byte) error {
	ss, started, created, err := decodePosition(pos)
	if err != nil {
		return err
	}
	r.restored, r.restoredStarted, r.restoredCreated = map[string]*split{}, started, created
	for _, s := range ss {
		r.restored[s.filter] = s
	}
	return nil
}

// Rescale takes, from the positions of every subtask of a run at another
// parallelism, the splits this subtask owns now, with their positions.
func (r *reader[T]) Rescale(positions [][]byte, sub, par int) error {
	filters := r.cfg.Subjects
	if len(filters) == 0 {
		filters = []string{""}
	}
	r.restored, r.restoredStarted = map[string]*split{}, true
	r.restoredCreated = 0
	for _, pos := range positions {
		ss, started, created, err := decodePosition(pos)
		if err != nil {
			return err
		}
		if created != 0 {
			if r.restoredCreated != 0 && created != r.restoredCreated {
				return fmt.Errorf("%w: its subtasks read streams created at different times", errCorruptPosition)
			}
			r.restoredCreated = created
		}
		r.restoredStarted = r.restoredStarted && started
		for _, s := range ss {
			i := indexOf(filters, s.filter)
			if (i < 0 && sub == 0) || (i >= 0 && owner(i, par) == sub) {
				r.restored[s.filter] = s // dropped with a warning at Start if unknown
			}
		}
	}
	return nil
}

func indexOf(fs []string, f string) int {
	for i, x := range fs {
		if x == f {
			return i
		}
	}
	return -1
}

// CommitPosition acknowledges, once a checkpoint completed, the messages
// delivered before it: the last one, which acknowledges all up to it
// (AckAll), or, on a work-queue stream (whose consumers must acknowledge
// explicitly), each of them; a work-queue or interest stream then removes
// them. A failure is logged: the job's positions are in its checkpoints.
func (r *reader[T]) CommitPosition(pos []byte) error {
	for i := len(r.acks) - 1; i >= 0; i-- {
		if !bytes.Equal(r.acks[i].pos, pos) {
			continue
		}
		done := r.acks[:i+1]
		var err error
		if r.explicit {
			for _, a := range done {
				for _, m := range a.msgs {
					if e := m.Ack(); e != nil && err == nil && !errors.Is(e, jetstream.ErrMsgAlreadyAckd) {
						err = e
					}
				}
			}
		} else if e := done[i].msg.Ack(); e != nil && !errors.Is(e, jetstream.ErrMsgAlreadyAckd) {
			err = e
		}
		clear(done)
		r.acks = append(r.acks[:0], r.acks[i+1:]...)
		if err != nil && r.ctx.Err() == nil {
			r.log.Warn("acknowledging messages failed", zap.Error(err))
		}
		return nil
	}
	return nil
}
