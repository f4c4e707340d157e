package weirtest

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"time"
)

// FaultKind is what a fault does.
type FaultKind uint8

// Fault kinds. Each is injected through the runtime: an operator's probe
// (weir.TestHarness), the job's checkpoint storage or its TCP connections.
const (
	// TaskFailure fails an operator subtask at its At-th record (counted
	// over the whole run, restarts included).
	TaskFailure FaultKind = iota
	// SnapshotFailure fails an operator subtask at its At-th snapshot.
	SnapshotFailure
	// CommitFailure fails a subtask (a sink, where there is one) at its
	// At-th notification that a checkpoint completed, before the operator
	// learns of it: a two-phase-commit sink fails before it commits.
	CommitFailure
	// SlowConsumer makes an operator subtask sleep Delay before each of
	// the SlowRecords records from its At-th on: back pressure.
	SlowConsumer
	// WriteError fails the At-th creation of a checkpoint state file.
	WriteError
	// TornWrite stores half of the At-th write to a checkpoint state
	// file, then fails it.
	TornWrite
	// SyncError fails the At-th fsync of a checkpoint state file.
	SyncError
	// SlowWrite delays the At-th write to a checkpoint state file by Delay.
	SlowWrite
	// ReadError fails the At-th opening of a checkpoint state file for a
	// restore. It fires only if the run restores from a checkpoint with
	// state files, so a read fault that did not fire is not a harness bug.
	ReadError
	// CorruptRead flips a bit in what the At-th opened checkpoint state
	// file returns (a corrupt file): the restore must detect it. It fires
	// only on a restore, as ReadError.
	CorruptRead
	// SlowRead delays the At-th opening of a checkpoint state file by
	// Delay. It fires only on a restore, as ReadError.
	SlowRead
	// ConnReset resets a TCP exchange connection once the job's
	// connections carried At bytes (WithTCPExchanges only).
	ConnReset
	// CommitAckFailure fails a TwoPhaseCommitSink (this package's) right
	// after its committers' At-th Commit succeeded: the transaction is
	// visible, but the task fails before it learns so, and the restored
	// job commits it again (Commit must be idempotent).
	CommitAckFailure
	numKinds
)

var kindNames = [numKinds]string{"task-failure", "snapshot-failure", "commit-failure", "slow-consumer",
	"write-error", "torn-write", "sync-error", "slow-write", "read-error", "corrupt-read", "slow-read", "conn-reset", "commit-ack-failure"}

func (k FaultKind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// Kinds is a set of fault kinds.
type Kinds uint32

// Of returns the set of the given kinds.
func Of(kinds ...FaultKind) Kinds {
	var s Kinds
	for _, k := range kinds {
		s |= 1 << k
	}
	return s
}

// AllKinds holds every fault kind.
const AllKinds = Kinds(1<<numKinds - 1)

// Has reports whether k is in s.
func (s Kinds) Has(k FaultKind) bool { return s&(1<<k) != 0 }

// conditional reports whether a fault of kind k fires only if the run
// happens to do what it fails (a restore that reads state files).
func (k FaultKind) conditional() bool { return k == ReadError || k == CorruptRead || k == SlowRead }

// operatorKind reports whether a fault of kind k targets one operator
// subtask.
func (k FaultKind) operatorKind() bool { return k <= SlowConsumer }

// Fault is one planned fault.
type Fault struct {
	Kind FaultKind
	// Operator (its UID) and Subtask name the operator subtask of the
	// operator kinds.
	Operator string
	Subtask  int
	// At is the count at which the fault fires: records, snapshots or
	// notifications of the operator subtask, state-file operations of
	// the checkpoint storage, or bytes over TCP, all counted from the
	// run's start.
	At    int64
	Delay time.Duration // SlowConsumer, SlowWrite
}

// slowRecords is how many records a SlowConsumer fault slows.
const slowRecords = 100

func (f Fault) String() string {
	switch {
	case f.Kind == SlowConsumer:
		return fmt.Sprintf("%s %s[%d] %d records from record %d +%v", f.Kind, f.Operator, f.Subtask, slowRecords, f.At, f.Delay)
	case f.Kind.operatorKind():
		what := map[FaultKind]string{TaskFailure: "record", SnapshotFailure: "snapshot", CommitFailure: "notification"}[f.Kind]
		return fmt.Sprintf("%s %s[%d] at %s %d", f.Kind, f.Operator, f.Subtask, what, f.At)
	case f.Kind == ConnReset:
		return fmt.Sprintf("%s at byte %d", f.Kind, f.At)
	case f.Kind == CommitAckFailure:
		return fmt.Sprintf("%s after commit %d", f.Kind, f.At)
	case f.Kind == SlowWrite:
		return fmt.Sprintf("%s at state-file write %d +%v", f.Kind, f.At, f.Delay)
	case f.Kind == SlowRead:
		return fmt.Sprintf("%s at state-file open %d +%v", f.Kind, f.At, f.Delay)
	}
	return fmt.Sprintf("%s at state-file op %d", f.Kind, f.At)
}

// subtaskProfile is what the fault-free run saw of one operator subtask.
type subtaskProfile struct {
	Operator string // UID
	Name     string
	Kind     opKind
	Subtask  int
	Records  int64
}

// profile is what the plan is drawn from: the fault-free run's operator
// subtasks, in a fixed order, its TCP volume and whether it committed
// through a recorded two-phase-commit sink.
type profile struct {
	subtasks []subtaskProfile
	tcpBytes int64
	commits  bool
	// files is how many state files the first checkpoint wrote.
	files int64
}

// planFaults draws the faults of seed: between lo and hi of the kinds in
// kinds that the job can have, each aimed by the fault-free run's
// profile. It is a pure function of its arguments.
func planFaults(seed uint64, kinds Kinds, lo, hi int, tcp bool, p profile) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	subs := slices.Clone(p.subtasks)
	slices.SortFunc(subs, func(a, b subtaskProfile) int {
		if a.Operator != b.Operator {
			if a.Operator < b.Operator {
				return -1
			}
			return 1
		}
		return a.Subtask - b.Subtask
	})
	pick := func(ok func(s subtaskProfile) bool) (subtaskProfile, bool) {
		var c []subtaskProfile
		for _, s := range subs {
			if ok(s) {
				c = append(c, s)
			}
		}
		if len(c) == 0 {
			return subtaskProfile{}, false
		}
		return c[rng.IntN(len(c))], true
	}
	withRecords := func(s subtaskProfile) bool { return s.Records > 0 }
	var avail []FaultKind
	for k := range numKinds {
		if !kinds.Has(k) || (k == ConnReset && (!tcp || p.tcpBytes < 2)) || (k == CommitAckFailure && !p.commits) {
			continue
		}
		if k == TaskFailure || k == SlowConsumer {
			if _, ok := pick(func(s subtaskProfile) bool { return withRecords(s) && (k == TaskFailure || s.Kind != sourceOp) }); !ok {
				continue
			}
		}
		avail = append(avail, k)
	}
	if len(avail) == 0 || len(subs) == 0 {
		return nil
	}
	n := lo + rng.IntN(hi-lo+1)
	faults := make([]Fault, 0, n)
	for range n {
		f := Fault{Kind: avail[rng.IntN(len(avail))]}
		switch f.Kind {
		case TaskFailure, SlowConsumer:
			s, _ := pick(func(s subtaskProfile) bool { return withRecords(s) && (f.Kind == TaskFailure || s.Kind != sourceOp) })
			f.Operator, f.Subtask, f.At = s.Operator, s.Subtask, 1+rng.Int64N(s.Records)
			if f.Kind == SlowConsumer {
				f.Delay = time.Duration(50+rng.IntN(250)) * time.Microsecond
			}
		case SnapshotFailure:
			s, _ := pick(func(subtaskProfile) bool { return true })
			f.Operator, f.Subtask, f.At = s.Operator, s.Subtask, 1+rng.Int64N(3)
		case CommitFailure:
			s, ok := pick(func(s subtaskProfile) bool { return s.Kind == sinkOp })
			if !ok {
				s, _ = pick(func(subtaskProfile) bool { return true })
			}
			f.Operator, f.Subtask, f.At = s.Operator, s.Subtask, 1+rng.Int64N(2)
		case ConnReset:
			// The volume rounded down to a power of two: the same seed
			// aims at the same byte although the volume varies a little
			// from run to run.
			vol := int64(1) << (bits.Len64(uint64(p.tcpBytes)) - 1)
			f.At = 1 + rng.Int64N(max64(1, vol/2))
		case CommitAckFailure:
			f.At = 1 + rng.Int64N(3)
		case SlowWrite, SlowRead:
			f.At = 1 + rng.Int64N(3*max64(1, p.files))
			f.Delay = time.Duration(1+rng.IntN(30)) * time.Millisecond
		default: // storage faults: in one of the first three checkpoints
			f.At = 1 + rng.Int64N(3*max64(1, p.files))
		}
		faults = append(faults, f)
	}
	return faults
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
