package task

// CurrentOperator names the operator of a chain whose code runs on the
// task's goroutine, so that a panic the task recovers names its operator
// (Error.Operator) without a recover per record. Each operator's
// per-record entry point marks itself (one pointer store), and code that
// resumes an operator's user code after a call downstream (a collector's
// emit) marks that operator again. The task clears the mark after each
// batch of records. A nil *CurrentOperator ignores marks.
type CurrentOperator struct{ name *string }

// Set marks the operator called *name as running (nil: none).
func (r *CurrentOperator) Set(name *string) {
	if r != nil {
		r.name = name
	}
}

// Name returns the name of the operator marked running, or "".
func (r *CurrentOperator) Name() string {
	if r == nil || r.name == nil {
		return ""
	}
	return *r.name
}
