package joins_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jobTimeout bounds every job a test runs: a liveness bug fails one test
// with a message instead of hanging the run.
const jobTimeout = 2 * time.Minute

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeoutCause(t.Context(), jobTimeout,
		fmt.Errorf("test %s: still running after %v: a liveness bug", t.Name(), jobTimeout))
	t.Cleanup(cancel)
	return ctx
}

var transports = []struct {
	name string
	opt  weir.Option
}{
	{"local", weir.WithTCPExchanges(false)},
	{"tcp", weir.WithTCPExchanges(true)},
}

// killer injects task failures: failure k fires at the first call of
// maybe at or after at[k] once a checkpoint completed since failure k-1,
// so that every failure restores from a checkpoint whatever the
// machine's speed.
type killer struct {
	job         atomic.Pointer[weir.Job]
	at          []int64
	seen, next  atomic.Int64
	completedAt atomic.Int64
}

func newKiller(seed uint64, kills int, every int64) *killer {
	r := rand.New(rand.NewPCG(seed, 7))
	k := &killer{}
	at := int64(0)
	for range kills {
		at += every/2 + r.Int64N(every)
		k.at = append(k.at, at)
	}
	return k
}

// maybe panics when the next failure is due.
func (k *killer) maybe() {
	c := k.seen.Add(1)
	if n, ok := k.due(c); ok {
		panic(fmt.Sprintf("injected failure %d at call %d", n, c))
	}
}

// due claims failure n if it is due at call c.
func (k *killer) due(c int64) (int64, bool) {
	n := k.next.Load()
	if int(n) >= len(k.at) || c < k.at[n] {
		return n, false
	}
	j := k.job.Load()
	if j == nil {
		return n, false
	}
	done := int64(j.CheckpointStats().Completed)
	if done > k.completedAt.Load() && k.next.CompareAndSwap(n, n+1) {
		k.completedAt.Store(done)
		return n, true
	}
	return n, false
}

// release is a held source's end of input: io.EOF once every failure
// fired; the failures still due fire here (whatever the machine's speed,
// each restores from a checkpoint), else it waits (nil).
func (k *killer) release() error {
	if k.fired() >= len(k.at) {
		return io.EOF
	}
	if n, ok := k.due(math.MaxInt64); ok {
		return fmt.Errorf("injected failure %d at the end of the input", n)
	}
	return nil
}

// fired is how many failures fired.
func (k *killer) fired() int { return int(k.next.Load()) }

// run starts env, lets k see the job, and waits for it.
func (k *killer) run(t *testing.T, env *weir.Environment) *weir.Result {
	t.Helper()
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	return res
}
