package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/zap"
)

// A source subtask's position, as checkpointed: version 2, then whether
// the subtask had started (looked up its partitions), the number of
// partitions, and per partition: topic (2-byte length, bytes), the topic's
// ID (16; all zero for unknown), partition (4), next offset (8), stop
// offset (8, -1 for none); big endian, sorted. Version 1 had no topic IDs.
const positionVersion = 2

// ReaderIdentity (weir.ReaderIdentifier) is "kafka": a position names
// the topics and partitions its offsets are of, so a source whose topic
// list changed reads the old offsets of the topics it still reads (and
// the added ones from their start); another kind of reader under the
// source's UID is refused at restore.
func (r *reader[T]) ReaderIdentity() string { return "kafka" }

func (r *reader[T]) Position() ([]byte, error) {
	ps := slices.SortedFunc(maps.Values(r.parts), func(a, b *partition) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	return encodePosition(ps, r.cl != nil), nil
}

func encodePosition(ps []*partition, started bool) []byte {
	b := []byte{positionVersion, 0}
	if started {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
	for _, p := range ps {
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.topic)))
		b = append(b, p.topic...)
		b = append(b, p.topicID[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(p.partition))
		b = binary.BigEndian.AppendUint64(b, uint64(p.next))
		b = binary.BigEndian.AppendUint64(b, uint64(p.stop))
	}
	return b
}

var errCorruptPosition = errors.New("kafka: corrupt source position")

func decodePosition(b []byte) (ps []*partition, started bool, err error) {
	if len(b) < 6 || (b[0] != 1 && b[0] != positionVersion) || b[1] > 1 {
		return nil, false, errCorruptPosition
	}
	idLen := 0
	if b[0] == positionVersion {
		idLen = len(kadm.TopicID{})
	}
	started = b[1] == 1
	n := binary.BigEndian.Uint32(b[2:])
	b = b[6:]
	for range n {
		if len(b) < 2 {
			return nil, false, errCorruptPosition
		}
		l := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+l+idLen+20 {
			return nil, false, errCorruptPosition
		}
		p := &partition{tp: tp{topic: string(b[2 : 2+l])}, end: -1}
		copy(p.topicID[:], b[2+l:2+l+idLen])
		b = b[2+l+idLen:]
		p.partition = int32(binary.BigEndian.Uint32(b))
		p.next = int64(binary.BigEndian.Uint64(b[4:]))
		p.stop = int64(binary.BigEndian.Uint64(b[12:]))
		if p.next < 0 || p.stop < noStop || p.partition < 0 {
			return nil, false, errCorruptPosition
		}
		ps = append(ps, p)
		b = b[20:]
	}
	if len(b) != 0 {
		return nil, false, errCorruptPosition
	}
	return ps, started, nil
}

// Seek restores the subtask's own position (same parallelism).
func (r *reader[T]) Seek(pos []byte) error {
	ps, started, err := decodePosition(pos)
	if err != nil {
		return err
	}
	r.restored, r.restoredStarted = map[tp]*partition{}, started
	for _, p := range ps {
		r.restored[p.tp] = p
	}
	return nil
}

// Rescale takes, from the positions of every subtask of a run at another
// parallelism, the partitions this subtask owns now, with their offsets.
func (r *reader[T]) Rescale(positions [][]byte, sub, par int) error {
	r.restored, r.restoredStarted = map[tp]*partition{}, true
	for _, pos := range positions {
		ps, started, err := decodePosition(pos)
		if err != nil {
			return err
		}
		r.restoredStarted = r.restoredStarted && started
		for _, p := range ps {
			if owner(p.tp, par) == sub {
				r.restored[p.tp] = p
			}
		}
	}
	return nil
}

// CommitPosition commits the offsets of a completed checkpoint to the
// consumer group, in the background; a failure is logged (the offsets
// are for monitoring only).
func (r *reader[T]) CommitPosition(pos []byte) error {
	if !r.cfg.CommitOffsets {
		return nil
	}
	ps, _, err := decodePosition(pos)
	if err != nil {
		return err
	}
	offs := kadm.Offsets{}
	for _, p := range ps {
		offs.Add(kadm.Offset{Topic: p.topic, Partition: p.partition, At: p.next, LeaderEpoch: -1})
	}
	r.mu.Lock()
	r.mu.commit = offs // a newer checkpoint replaces one not committed yet
	r.mu.Unlock()
	signal(r.commitReady)
	return nil
}

func (r *reader[T]) commitLoop() {
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.commitReady:
		}
		r.mu.Lock()
		offs := r.mu.commit
		r.mu.commit = nil
		r.mu.Unlock()
		if len(offs) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.RequestTimeout)
		resp, err := r.adm.CommitOffsets(ctx, r.cfg.Group, offs)
		cancel()
		if err == nil {
			err = resp.Error()
		}
		if err != nil && r.ctx.Err() == nil {
			r.log.Warn("committing offsets to the consumer group failed", zap.String("group", r.cfg.Group),
				zap.Error(fmt.Errorf("kafka: %w", err)))
		}
	}
}
