package weir_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
)

// errPoisonRecord is a user function's error that the caller tests for
// with errors.Is: registered, so that it keeps its identity when the task
// that returned it runs on a worker.
var errPoisonRecord = errors.New("poison record")

// errUnregistered is not registered: in cluster mode it arrives as text.
var errUnregistered = errors.New("unregistered")

func init() {
	if err := weir.RegisterError("weir_test.poison", errPoisonRecord); err != nil {
		panic(err)
	}
}

// A job across processes fails with the error of a user function on a
// worker: the job's error names it and matches a registered error with
// errors.Is, as the same job in one process does.
func TestClusterErrorKeepsItsIdentity(t *testing.T) {
	build := func(env *weir.Environment) {
		src := weir.FromGenerator(env, 1000, func(i int64) int64 { return i }).Parallelism(1).UID("src")
		m := weir.MapErr(src, func(i int64) (int64, error) {
			if i == 500 {
				return 0, fmt.Errorf("record %d: %w (and %w)", i, errPoisonRecord, errUnregistered)
			}
			return i, nil
		})
		weir.Discard(m.UID("out"))
	}
	noRestart := weir.WithRestartStrategy(weir.NoRestart())

	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}), noRestart)
	build(env)
	_, local := env.Execute(testCtx(t))
	require.ErrorIs(t, local, errPoisonRecord)
	require.ErrorIs(t, local, errUnregistered)

	_, err := runClusterCkpt(t, weir.CheckpointConfig{Interval: time.Hour}, weir.ClusterConfig{}, weir.WorkerConfig{}, build, nil, noRestart)
	require.ErrorContains(t, err, "record 500: poison record (and unregistered)")
	require.ErrorContains(t, err, "on worker w", "the error says where the task ran")
	require.ErrorIs(t, err, errPoisonRecord)
	require.NotErrorIs(t, err, errUnregistered, "an unregistered error is only text across processes")
}

func TestRegisterErrorConflicts(t *testing.T) {
	require.NoError(t, weir.RegisterError("weir_test.poison", errPoisonRecord), "the same pair again")
	require.ErrorContains(t, weir.RegisterError("weir_test.poison", errUnregistered), "registered for another error")
	require.ErrorContains(t, weir.RegisterError("weir_test.other", errPoisonRecord), "registered under another code")
}
