// Package credit is the credit accounting of weir's credit-based flow
// control, as pure, deterministic state machines (no goroutines, time, I/O
// or locks; callers serialize access). It is modelled on Flink's
// CreditBasedSequenceNumberingViewReader (sender side) and BufferManager
// with its gate's floating LocalBufferPool (receiver side), and it counts
// buffers: the driver holds the memory.
//
// Credit is the number of free buffers a receiver has for one channel:
// the sender may send one data buffer per credit; events take none.
//
// A Sender is the producer side's state for one receiver: credit, the next
// sequence number, the block after an aligned barrier, and the one backlog
// announcement owed when credit runs out. Its driver (the TCP server's
// connection, or the in-process exchange), for each receiver:
//
//  1. creates it with the PARTITION_REQUEST's initial credit (NewSender);
//  2. applies ADD_CREDIT with AddCredit and RESUME_CONSUMPTION with Resume,
//     treating ErrZeroCredit and ErrCreditOverflow as protocol errors;
//  3. before sending the next queued buffer, asks CanSend; after sending a
//     frame of n buffers, calls Sent, which returns the sequence number of
//     its first buffer;
//  4. after each send and each credit change, asks
//     NeedBacklogAnnouncement(backlog) and, when it returns true, sends a
//     BACKLOG_ANNOUNCEMENT.
//
// A Channel is the consumer side's state for one input channel: its
// exclusive buffers, the floating buffers its gate's Pool granted it,
// which of them are free (credit) or hold received data, the credit not yet
// announced, and the next expected sequence number. A Pool is the floating
// buffers of one gate, granted to channels whose senders have a backlog and
// queued for when all are taken. The driver (the TCP client's connection,
// or the in-process exchange), with one Pool per gate and one Channel per
// input channel:
//
//  1. sends PARTITION_REQUEST with InitialCredit;
//  2. for every buffer of a BUFFER_RESPONSE (each partial buffer counts),
//     calls Receive(seq) and, for a data buffer, Take, which says which
//     kind of buffer now holds it; a *SequenceError or ErrNoCredit fails
//     the channel;
//  3. calls OnBacklog with the backlog of every BUFFER_RESPONSE and every
//     BACKLOG_ANNOUNCEMENT, so the channel requests floating buffers;
//  4. when a received data buffer is consumed, calls Recycle with the
//     Source that Take returned;
//  5. after any of these, takes Pool.Credited, calls TakeUnannouncedCredit
//     on each channel listed and sends one ADD_CREDIT per positive result,
//     coalescing credit;
//  6. sends RESUME_CONSUMPTION after consuming an aligned barrier;
//  7. calls Release when the channel ends (end of partition, cancel,
//     failure) and still Recycles the buffers it holds.
//
// Broken invariants (a buffer recycled that was never held, negative
// counts, more floating buffers held than exist) are bugs and panic with
// the values; bad peer input returns errors.
package credit
