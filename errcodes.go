package weir

import (
	"fmt"

	"github.com/weirstream/weir/internal/errcode"
)

// RegisterError gives err a code under which its identity crosses
// processes. In cluster mode a task's error reaches the coordinator as
// text, so errors.Is on the job's error matches only the errors
// registered here (and the runtime's own sentinels, registered already):
// register an error a user function returns and the caller tests for,
// under the same code in every process of the job — from a package
// variable's initialization or an init function, before Execute or
// RunWorker. A code already registered for another error, or an error
// registered under another code, is an error.
func RegisterError(code string, err error) error {
	if e := errcode.Register("user."+code, err); e != nil {
		return fmt.Errorf("weir: RegisterError: %w", e)
	}
	return nil
}

// The root package's errors a task's failure can match (see
// internal/jobmaster's registrations of the runtime's).
func init() {
	for _, r := range []struct {
		code string
		err  error
	}{
		{"weir.source-changed", ErrSourceChanged},
		{"weir.async-timeout", ErrAsyncTimeout},
		{"weir.corrupt-txn-handle", ErrCorruptTxnHandle},
		{"weir.event-time-timer-not-keyed", ErrEventTimeTimerNotKeyed},
	} {
		errcode.MustRegister(r.code, r.err)
	}
}
