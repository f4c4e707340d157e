package errcode_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/internal/errcode"
)

var (
	errA = errors.New("a")
	errB = fmt.Errorf("b, a kind of a: %w", errA)
	errC = errors.New("c")
)

func init() {
	errcode.MustRegister("test.a", errA)
	errcode.MustRegister("test.b", errB)
	errcode.MustRegister("test.c", errC)
}

// An error made in one process, sent as text with its codes, matches the
// same registered errors in the other.
func TestRoundTrip(t *testing.T) {
	made := fmt.Errorf("task x: %w", errB)
	codes := errcode.Codes(made)
	require.Equal(t, []string{"test.a", "test.b"}, codes)

	got := errcode.Wrap(errors.New(made.Error()), codes)
	require.Equal(t, made.Error(), got.Error())
	require.ErrorIs(t, got, errA)
	require.ErrorIs(t, got, errB)
	require.NotErrorIs(t, got, errC)

	// Wrapped again, as the coordinator adds its context.
	outer := fmt.Errorf("weir: job failed: %w", got)
	require.ErrorIs(t, outer, errB)
}

func TestUnknownAndNone(t *testing.T) {
	require.Nil(t, errcode.Codes(nil))
	require.Nil(t, errcode.Codes(errors.New("plain")))
	plain := errors.New("plain")
	require.Same(t, plain, errcode.Wrap(plain, nil))
	require.Same(t, plain, errcode.Wrap(plain, []string{"from.a.later.version"}), "unknown codes are ignored")
	got := errcode.Wrap(plain, []string{"from.a.later.version", "test.c"})
	require.ErrorIs(t, got, errC)
	require.Nil(t, errcode.Wrap(nil, []string{"test.c"}))
}

func TestRegisterConflicts(t *testing.T) {
	require.NoError(t, errcode.Register("test.a", errA), "the same pair again")
	require.ErrorContains(t, errcode.Register("test.a", errC), `code "test.a" is registered for another error`)
	require.ErrorContains(t, errcode.Register("test.other", errA), "registered under another code (test.a)")
	require.Error(t, errcode.Register("", errors.New("x")))
	require.Error(t, errcode.Register("test.nil", nil))
}
