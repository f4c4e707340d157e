package task

import "context"

// This file lets an operator with work on other goroutines (the async I/O
// operator) take part in the task's loop: it hands results back through
// the mailbox (Post) and stops the task from taking input while it has no
// room (BlockInput), without blocking the loop: mails, processing-time
// callbacks, flushes and unaligned barriers go on meanwhile.

// Post queues m to run in the task's goroutine between records, as
// Task.Post: the way an operator hands back what other goroutines did for
// it, so that the task goroutine alone touches its state. Safe from any
// goroutine; fails with ErrMailboxClosed once the task stopped taking
// mails (m then never runs).
func (c *OperatorContext) Post(m func() error) error { return c.t.Post(m) }

// BlockInput tells the task whether the operator can take more input.
// While any operator of the chain blocks it, the task pulls no record
// from its source or input gate — in the middle of a buffer, the rest of
// the buffer waits — but goes on with its mailbox: mails, processing-time
// callbacks, flushes, and barriers that overtake data (unaligned). The
// operator unblocks it from a mail (Post) or a callback. Call it only from
// the task's goroutine.
func (c *OperatorContext) BlockInput(blocked bool) {
	t := c.t
	if t.blocking[c.index] == blocked {
		return
	}
	t.blocking[c.index] = blocked
	if blocked {
		t.blocked++
	} else {
		t.blocked--
	}
}

// waitUnblocked waits, with the input blocked by an operator, for a mail,
// a processing-time callback or the flush deadline; an unaligned barrier
// is taken meanwhile.
func (t *Task) waitUnblocked(ctx context.Context) error {
	var ready <-chan struct{}
	if t.cfg.Gate != nil {
		if err := t.takePriority(); err != nil {
			return err
		}
		// A wake-up for priority items; the data it may announce stays
		// queued in the gate until the input is unblocked.
		ready = t.cfg.Gate.Ready()
	}
	if t.blocked == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return t.wait(ctx, ready, false)
}
