package weir

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/weirstream/weir/barrier"
)

// CheckpointBeginner is an optional interface of a TwoPhaseCommitter whose
// transactions are named after checkpoints (a Kafka sink's transactional
// ids): the sink calls BeginAfter instead of Begin, with the last
// checkpoint taken before the new transaction (the one the job restored,
// or 0 at a fresh start), so the transaction will be pre-committed at a
// later one. After a failure, a committer can thus tell the transactions
// of the restored checkpoint (named at or below it, committed by the sink)
// from those a failed attempt left open (named above it, to be aborted).
//
// A TwoPhaseCommitter may also implement io.Closer: the sink closes it
// when its task ends, after aborting the open transaction. Commit and
// Abort may still be called after Close, for the commits at the end of
// the job.
type CheckpointBeginner[Txn any] interface {
	BeginAfter(last barrier.CheckpointID) (Txn, error)
}

// ContextSetter is an optional interface of a TwoPhaseCommitter that calls
// other systems: before any other call the sink hands it a context that
// is done when the sink's task is canceled (the job is canceled or
// restarts), so that a commit or flush waiting on an unreachable system
// gives way to the restart instead of holding it up. The context stays
// alive when the task finishes; calls after Close (the commits at the end
// of the job) should not use it.
type ContextSetter interface {
	SetContext(ctx context.Context)
}

// TimestampWriter is an optional interface of a TwoPhaseCommitter that
// writes the records' event timestamps too (a Kafka sink sets each
// record's timestamp): the sink calls WriteTimestamped instead of Write,
// with the record's timestamp in unix milliseconds, or
// eventtime.NoTimestamp if the stream has none.
type TimestampWriter[T, Txn any] interface {
	WriteTimestamped(txn Txn, v T, ts int64) error
}

// TxnHandle is what a sink whose transactions live in another system (a
// Kafka transaction, a PostgreSQL prepared transaction), named after
// checkpoints (CheckpointBeginner), checkpoints of each: its name there
// and how far it got. The sink's Txn embeds it beside the system's own
// fixed-size fields (a producer ID and epoch, a transaction ID), which
// AppendTxnHandle and DecodeTxnHandle encode with it.
type TxnHandle struct {
	// ID names the transaction in the other system (at most 65535 bytes).
	ID string
	// Empty: nothing was written, there is nothing to commit.
	Empty bool
	// PreCommitted: pre-committed (or empty); ID and the system's own
	// fields are final.
	PreCommitted bool
}

// ErrCorruptTxnHandle is returned by DecodeTxnHandle for bytes that are
// not a handle with the expected extra fields.
var ErrCorruptTxnHandle = errors.New("weir: corrupt transaction handle")

// AppendTxnHandle appends h with extra, the sink's own fields, to dst:
// the ID (2-byte big-endian length, bytes), extra, then the flags (one
// byte: 1 empty, 2 pre-committed).
func AppendTxnHandle(dst []byte, h TxnHandle, extra []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.ID)))
	dst = append(dst, h.ID...)
	dst = append(dst, extra...)
	var f byte
	if h.Empty {
		f |= 1
	}
	if h.PreCommitted {
		f |= 2
	}
	return append(dst, f)
}

// DecodeTxnHandle decodes what AppendTxnHandle wrote with extraLen bytes
// of extra, and returns the handle and the extra bytes (a subslice of
// src), or ErrCorruptTxnHandle.
func DecodeTxnHandle(src []byte, extraLen int) (TxnHandle, []byte, error) {
	if len(src) < 2 {
		return TxnHandle{}, nil, ErrCorruptTxnHandle
	}
	l := int(binary.BigEndian.Uint16(src))
	if len(src) != 2+l+extraLen+1 || src[len(src)-1]&^3 != 0 {
		return TxnHandle{}, nil, ErrCorruptTxnHandle
	}
	f := src[len(src)-1]
	h := TxnHandle{ID: string(src[2 : 2+l]), Empty: f&1 != 0, PreCommitted: f&2 != 0}
	return h, src[2+l : 2+l+extraLen], nil
}
