// Package async is the core of weir's asynchronous I/O operator (Flink's
// AsyncWaitOperator): a Queue of the elements whose requests to another
// system are in flight, which decides when each request starts, when a
// result or a watermark may leave, and which requests timed out.
//
// # The queue
//
// A Queue holds at most Config.Capacity elements: those whose request is
// in flight, timed out or done but not yet emitted. An element that
// arrives while the queue is full waits, not issued, in the queue's
// overflow until a place frees (the caller stops taking input while Full
// reports true, so the overflow holds at most what one input produced).
// In Ordered mode results leave in input order. In Unordered mode a
// result leaves as soon as it is done, but never across a watermark: the
// watermarks cut the elements into segments, a segment's results leave in
// the order they completed, a watermark leaves once every element before
// it did, and no element after it leaves before it. Two watermarks with
// no element between them are one: the later replaces the earlier, so the
// queue holds at most one watermark per element.
//
// The Queue is pure: elements, results, watermarks and the processing
// time come in as method calls, and it starts no goroutine, reads no
// clock and does no I/O. What the caller must do is handed back by Ready.
//
// # The caller's duties, in order
//
//  1. New, then Add each restored element (Snapshot's, in order).
//  2. For each input element: Add, with the processing time now. While
//     Full, take no further input (back-pressure).
//  3. For each input watermark: Watermark.
//  4. When a request's result arrives: Complete with the request's ID.
//     A result for an ID the queue no longer knows (the request timed out)
//     is ignored.
//  5. When the processing time reaches NextDeadline: Timeout, which
//     returns the requests that timed out; fail, or Complete each with a
//     fallback result under the ID Timeout returned (a late result of the
//     first request is ignored).
//  6. After each of 1–5: TakeIssued, and start a request for each; then
//     TakeOut, and emit each in order (a record with its input's
//     timestamp, a watermark where it stands).
//  7. At a checkpoint: Snapshot, the elements not yet emitted in input
//     order (watermarks are not part of it); a restored queue issues them
//     again.
package async
