// Package network moves serialized records from the tasks that produce
// them to the tasks that consume them, in one process or over TCP, with
// Flink's credit-based flow control.
//
// A ResultPartition is a producer task's output towards one consuming
// operator: one Subpartition, a FIFO of buffers, per consumer subtask (one
// for a forward exchange). A RecordWriter serializes values into it,
// choosing subpartitions by its Partitioning (Forward, Hash by key group,
// Rebalance, Broadcast); each record is a 4-byte big-endian length and its
// bytes, split across buffers when it does not fit (docs/protocol.md,
// "Data buffers and records"), and a keyed record to several subtasks
// starts with its key group (KeyGroupOf). Buffers come from a bounded
// buffer.LocalPool: a producer that finds it empty waits until consumers
// release some, which is back pressure (it is woken once a few are free,
// at most as many as its consumers can take without its writing more:
// ResultPartition.SetWakeBatch); a record caught without room in the
// middle takes one of a few overdraft buffers instead.
//
// On the consuming side an InputGate merges a task's InputChannels, one
// per producer subtask: a LocalChannel hands a Subpartition's buffers over
// by reference within the process, a RemoteChannel reads one from another
// process through a ConnectionManager (one TCP connection per remote
// address, shared by its channels), and a Deserializer turns each
// channel's buffers back into records, without copying those that lie in
// one buffer. The producing process registers its partitions in a
// PartitionManager and serves them with a Server. A remote channel's
// credit is the number of its gate's buffers it may fill (RemoteBuffers,
// with the pure accounting of network/credit): the server sends a data
// buffer only against credit, so a slow consumer stalls its producers and
// memory stays within the configured pools, whatever the input rate.
//
// Events travel in band between data buffers: checkpoint barriers, end of
// partition, watermarks (network/wire). For unaligned checkpoints a
// barrier may travel as a priority event that overtakes the buffers
// queued in a subpartition and in a channel; what it overtook is handed,
// in stream order, to a Recorder and becomes the checkpoint's channel
// state.
//
// Only a partition's producing task calls its write methods, and only a
// gate's consuming task polls it; the TCP connections have a reader and a
// writer goroutine each. The hot path (serializing, handing over,
// deserializing a record) takes no lock, makes no channel send and
// allocates nothing per record.
package network
