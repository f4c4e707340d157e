package upgradetest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/state"
)

// A restore refused for a state that changed type, for an operator whose
// state no operator takes or for an operator of another kind under the
// same ID fails the job once, with that error, under a restart strategy
// that would restart it a thousand times: a restart restores from the
// same savepoint and would fail the same way. Nothing of v2 is committed.
func TestRefusedRestoreDoesNotRestart(t *testing.T) {
	refusals := []struct {
		name    string
		v2      spec
		wantErr error
		errHas  string
	}{
		{"the sum's state int64 → string", spec{uids: true, sumState: stringSum}, state.ErrIncompatibleState,
			`state "sum" restored from the checkpoint as value of int64, declared now as value of string`},
		{"the sum's state int64 → a struct of two int64", spec{uids: true, sumState: accSum}, state.ErrIncompatibleState, "operator process"},
		{"the sum removed", spec{uids: true, noSum: true}, weir.ErrNonRestoredState, `process (ID "sum")`},
		{"the sum's UID on a reduce", spec{uids: true, noSum: true, before: "reduce", beforeUID: "sum"}, weir.ErrOperatorKindChanged, "sum"},
	}
	strategies := []struct {
		name string
		s    func() weir.RestartStrategy
	}{
		{"fixed delay", func() weir.RestartStrategy { return weir.FixedDelayRestart(1000, time.Millisecond) }},
		{"exponential delay, unlimited", func() weir.RestartStrategy {
			return weir.ExponentialDelayRestart(weir.ExponentialDelayConfig{Initial: time.Millisecond, Max: time.Millisecond})
		}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			sp := takeSavepoint(t, spec{uids: true}, m.stop)
			for _, r := range refusals {
				for _, st := range strategies {
					t.Run(r.name+"/"+st.name, func(t *testing.T) {
						sp.reset(t)
						before := committed(t, sp.out)
						core, logs := observer.New(zap.WarnLevel)
						env := weir.NewEnvironment(options(r.v2, weir.CheckpointConfig{Interval: 20 * time.Millisecond}, zap.New(core),
							weir.WithRestoreFrom(sp.path), weir.WithRestartStrategy(st.s()))...)
						build(env, r.v2, sp.out, nil)
						res, err := env.Execute(testCtx(t))
						require.ErrorIs(t, err, r.wantErr)
						require.ErrorContains(t, err, r.errHas)
						if res != nil {
							require.Zero(t, res.Restarts)
						}
						require.Empty(t, logs.FilterMessageSnippet("restarting").All(), "the job is not restarted")
						require.Equal(t, before, committed(t, sp.out), "v2 committed nothing")
					})
				}
			}
		})
	}
}
