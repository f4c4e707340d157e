package joins_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
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
// maybe at or after at[k] once the job restarted after failure k-1 and a
// checkpoint of the new attempt completed. So every failure fails an
// attempt of its own and restores from a checkpoint taken in it,
// whatever the machine's speed: a job run with k.at's failures restarts
// exactly len(k.at) times.
//
// The job's readers call attemptStarted when they are made (each attempt
// makes its own, once the attempt before has ended). Without it a
// failure could fire in the attempt of the one before, in the moment
// between that failure and the attempt's end: a checkpoint the failing
// task had acknowledged may still complete then, and another subtask's
// call may be due. Two failures of one attempt make one restart.
type killer struct {
	job  atomic.Pointer[weir.Job]
	at   []int64
	seen atomic.Int64
	next atomic.Int64 // failures fired
	mu   sync.Mutex
	// armed: an attempt started since the last failure; base: the
	// completed checkpoints when it started.
	armed bool
	base  int
}

func newKiller(seed uint64, kills int, every int64) *killer {
	r := rand.New(rand.NewPCG(seed, 7))
	k := &killer{armed: true}
	at := int64(0)
	for range kills {
		at += every/2 + r.Int64N(every)
		k.at = append(k.at, at)
	}
	return k
}

// attemptStarted is called by each reader the job makes.
func (k *killer) attemptStarted() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.armed {
		return
	}
	k.armed = true
	if j := k.job.Load(); j != nil {
		k.base = j.CheckpointStats().Completed
	}
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
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.armed || k.next.Load() != n || j.CheckpointStats().Completed <= k.base {
		return n, false
	}
	k.armed = false
	k.next.Store(n + 1)
	return n, true
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
