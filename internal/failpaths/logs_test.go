package failpaths

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir"
)

// A canceled job (Ctrl-C in the examples) is logged as canceled, in
// words, at Info: no line reads as a failure (it logged "checkpointing
// stopped for the failed attempt {"error": "context canceled"}"), and
// nothing is logged at WARN or above.
func TestCancelIsLoggedAsCancel(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithLogger(zap.New(core)),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	src := weir.FromGenerator(env, -1, func(i int64) int64 {
		if i == 1000 {
			cancel()
		}
		return i
	}).UID("numbers")
	weir.Discard(weir.Map(src.Rebalance(), func(v int64) int64 { return v }))
	_, err := env.Execute(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotEmpty(t, logs.FilterMessage("checkpointing stopped: the job was canceled").All())
	for _, e := range logs.All() {
		require.NotContains(t, e.Message, "failed", "%s %v", e.Message, e.ContextMap())
		require.Less(t, e.Level, zapcore.WarnLevel, "%s %v", e.Message, e.ContextMap())
	}
}
