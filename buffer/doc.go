// Package buffer owns weir's network memory.
//
// A Buffer is a reference-counted view of one fixed-size memory segment
// (default 32 KiB). Records are serialized into buffers, buffers travel
// between tasks (in-process by reference, over TCP by copy into the peer's
// buffers), and the last Release hands the segment back to the pool it came
// from. Slices share their parent's reference count, so a received frame
// holding several buffers is cut up without copying.
//
// Memory is bounded: a worker has one GlobalPool of a fixed number of
// segments, allocated lazily. Every result partition and input gate takes a
// LocalPool from it with a guaranteed minimum (reserved up front, so a job
// that does not fit fails at deployment with ErrInsufficient rather than
// deadlocking later) and a maximum. A producer that finds its local pool
// empty waits on Available or RequestBlocking; it wakes when a consumer
// releases a buffer (or, with AvailableAfter and RequestBlockingAfter,
// once k were recycled: one wake-up per k buffers).
// That wait is back pressure.
//
// Releasing a buffer twice, or using it after its last release, panics: it
// is a bug in the runtime, never a user error.
package buffer
