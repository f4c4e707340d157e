// Package errcode carries the identity of errors between the processes of
// a job. A task on a worker fails with an error the coordinator receives
// as text; errors.Is on the job's error would match nothing. Errors that
// callers test for (sentinels such as state.ErrIncompatibleState) are
// registered here under a code, the same in every process of the job: a
// worker sends, with the text, the codes of the registered errors its
// error matches (Codes), and the coordinator rebuilds an error that
// matches them again (Wrap).
package errcode

import (
	"errors"
	"fmt"
	"sync"
)

var registry struct {
	sync.RWMutex
	byCode  map[string]error
	entries []entry // in registration order
}

type entry struct {
	code string
	err  error
}

// Register registers err under code. Registering the same pair again does
// nothing; a code or an error registered with another partner is an
// error.
func Register(code string, err error) error {
	if code == "" || err == nil {
		return errors.New("errcode: an error registers under a non-empty code")
	}
	registry.Lock()
	defer registry.Unlock()
	if old, ok := registry.byCode[code]; ok {
		if old == err {
			return nil
		}
		return fmt.Errorf("errcode: code %q is registered for another error (%v)", code, old)
	}
	for _, e := range registry.entries {
		if e.err == err {
			return fmt.Errorf("errcode: error %q is registered under another code (%s)", err, e.code)
		}
	}
	if registry.byCode == nil {
		registry.byCode = map[string]error{}
	}
	registry.byCode[code] = err
	registry.entries = append(registry.entries, entry{code, err})
	return nil
}

// MustRegister is Register for the registrations of package variables,
// whose failure is a programming error.
func MustRegister(code string, err error) {
	if e := Register(code, err); e != nil {
		panic(e)
	}
}

// Codes returns the codes of the registered errors that err matches
// (errors.Is), in registration order; nil if none.
func Codes(err error) []string {
	if err == nil {
		return nil
	}
	registry.RLock()
	defer registry.RUnlock()
	var codes []string
	for _, e := range registry.entries {
		if errors.Is(err, e.err) {
			codes = append(codes, e.code)
		}
	}
	return codes
}

// Wrap returns err matching, besides what it matches, the registered
// errors of codes; codes this process does not know (a worker built with
// a later version) are ignored. Its text is err's.
func Wrap(err error, codes []string) error {
	if err == nil || len(codes) == 0 {
		return err
	}
	registry.RLock()
	var targets []error
	for _, c := range codes {
		if t, ok := registry.byCode[c]; ok {
			targets = append(targets, t)
		}
	}
	registry.RUnlock()
	if len(targets) == 0 {
		return err
	}
	return &remote{errs: append([]error{err}, targets...)}
}

// remote is an error received from another process (errs[0]), with the
// registered errors it matched there (the rest).
type remote struct{ errs []error }

func (r *remote) Error() string { return r.errs[0].Error() }

// Unwrap makes errors.Is and errors.As see the received error and the
// registered errors it matched where it was made.
func (r *remote) Unwrap() []error { return r.errs }
