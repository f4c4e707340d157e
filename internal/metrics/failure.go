package metrics

import "time"

// Failure is one failure of a job, as its exception history keeps it:
// when, where, the error and the errors it wraps, and the stack of a
// panic in user code.
type Failure struct {
	Time time.Time
	// Task is the failed subtask ("map (2/4)"); Operator the operator of
	// its chain that failed; both empty when the failure was not a
	// task's (a lost worker, a failed checkpoint).
	Task, Operator string
	// Location is where the task ran: "local", a worker's ID, or "".
	Location string
	// Type is the Go type of the innermost error ("*task.PanicError").
	Type string
	// Chain is the error and the errors it wraps, outermost first.
	Chain []string
	// Stack is the goroutine stack of a panic ("" for an error).
	Stack string
	// Restarting is whether the job restarted after it (false: it ended
	// the job).
	Restarting bool
}
