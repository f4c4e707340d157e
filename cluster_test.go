package weir_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/storagetest"
)

// clusterJob builds the keyed-sum job writing "key sum" lines through the
// exactly-once file sink; every process of a test cluster builds it.
// hook runs on every record of the map stage (in whichever process).
func buildClusterJob(env *weir.Environment, n int64, out string, hook func()) {
	src := weir.FromGenerator(env, n, func(i int64) [2]int64 { return [2]int64{i % 37, i} }).WithCodec(pairCodec)
	m := weir.Map(src, func(v [2]int64) [2]int64 {
		if hook != nil {
			hook()
		}
		return v
	}).Name("hook").WithCodec(pairCodec)
	sums := weir.Reduce(weir.KeyBy(m, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).Name("sum")
	weir.FileSink(sums, out, func(v [2]int64) []byte { return fmt.Appendf(nil, "%d %d", v[0], v[1]) })
}

// readSums reads the committed output: the final sum per key and the
// number of lines.
func readSums(t *testing.T, out string) (map[int64]int64, int) {
	t.Helper()
	lines := committedLines(t, out)
	final := map[int64]int64{}
	for _, l := range lines {
		f := strings.Fields(l)
		require.Len(t, f, 2, "line %q", l)
		k, _ := strconv.ParseInt(f[0], 10, 64)
		v, _ := strconv.ParseInt(f[1], 10, 64)
		final[k] = max(final[k], v)
	}
	return final, len(lines)
}

type testCluster struct {
	t       testing.TB
	addr    string
	opts    []weir.Option
	build   func(env *weir.Environment)
	wcfg    weir.WorkerConfig // template
	wg      sync.WaitGroup
	mu      sync.Mutex
	workers map[string]context.CancelFunc
	errs    map[string]error
}

func (c *testCluster) startWorker(id string) {
	ctx, cancel := context.WithCancel(testCtx(c.t))
	env := weir.NewEnvironment(c.opts...)
	c.build(env)
	c.mu.Lock()
	c.workers[id] = cancel
	c.mu.Unlock()
	wc := c.wcfg
	wc.Coordinator, wc.ID, wc.Token = c.addr, id, "secret"
	c.wg.Go(func() {
		err := env.RunWorker(ctx, wc)
		c.mu.Lock()
		c.errs[id] = err
		c.mu.Unlock()
	})
}

func (c *testCluster) kill(id string) {
	c.mu.Lock()
	cancel := c.workers[id]
	c.mu.Unlock()
	cancel()
}

// runCluster runs the job with a coordinator and two workers in this
// process (each with its own environment, network and data plane, as
// separate processes would); during runs while the job runs.
func runCluster(t testing.TB, build func(env *weir.Environment), during func(c *testCluster)) (*weir.Result, error) {
	return runClusterWith(t, weir.ClusterConfig{}, weir.WorkerConfig{}, build, during)
}

func runClusterWith(t testing.TB, cc weir.ClusterConfig, wc weir.WorkerConfig, build func(env *weir.Environment), during func(c *testCluster)) (*weir.Result, error) {
	return runClusterCkpt(t, weir.CheckpointConfig{Interval: 20 * time.Millisecond}, cc, wc, build, during)
}

// runClusterCkpt is runClusterWith with its checkpointing (Dir is set).
// Every process gets the options extra too.
func runClusterCkpt(t testing.TB, ckpt weir.CheckpointConfig, cc weir.ClusterConfig, wc weir.WorkerConfig, build func(env *weir.Environment), during func(c *testCluster), extra ...weir.Option) (*weir.Result, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if ckpt.Dir == "" {
		ckpt.Dir = t.TempDir()
	}
	opts := append([]weir.Option{weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithCheckpointing(ckpt)}, extra...)
	c := &testCluster{t: t, addr: ln.Addr().String(), opts: opts, build: build, wcfg: wc,
		workers: map[string]context.CancelFunc{}, errs: map[string]error{}}
	cc.Listener, cc.Workers, cc.Token, cc.WorkerTimeout = ln, 2, "secret", 20*time.Second
	env := weir.NewEnvironment(append(opts, weir.WithCluster(cc))...)
	build(env)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	c.startWorker("w1")
	c.startWorker("w2")
	if during != nil {
		during(c)
	}
	res, err := job.Wait()
	c.wg.Wait() // the coordinator shut the workers down
	for id, werr := range c.errs {
		if werr != nil && werr != context.Canceled {
			t.Errorf("worker %s: %v", id, werr)
		}
	}
	return res, err
}

func TestClusterJobExactlyOnce(t *testing.T) {
	const n = 50000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		out := filepath.Join(t.TempDir(), "out")
		res, err := runClusterCkpt(t, weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: s.Root()}, weir.ClusterConfig{}, weir.WorkerConfig{},
			func(env *weir.Environment) { buildClusterJob(env, n, out, nil) }, nil)
		require.NoError(t, err)
		require.Zero(t, res.Restarts)
		require.Len(t, res.Tasks, 4, "metrics of every task, reported by the workers")
		require.EqualValues(t, n, res.RecordsIn(), "the sum tasks read every record once")
		final, lines := readSums(t, out)
		require.Equal(t, wantSums(n), final)
		require.Equal(t, n, lines)
	})
}

// Unaligned checkpoints with an alignment timeout across processes: a
// task fails once; the job restores the channel state the workers wrote
// and the committed output counts every record once.
func TestClusterUnalignedExactlyOnce(t *testing.T) {
	const n = 100000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		out := filepath.Join(t.TempDir(), "out")
		var seen atomic.Int64
		hook := func() {
			if seen.Add(1) == 40000 {
				panic("injected task failure")
			}
		}
		ckpt := weir.CheckpointConfig{Interval: 20 * time.Millisecond, Unaligned: true, AlignedTimeout: 2 * time.Millisecond, Dir: s.Root()}
		res, err := runClusterCkpt(t, ckpt, weir.ClusterConfig{}, weir.WorkerConfig{}, func(env *weir.Environment) { buildClusterJob(env, n, out, hook) }, nil)
		require.NoError(t, err)
		require.Equal(t, 1, res.Restarts)
		final, lines := readSums(t, out)
		require.Equal(t, wantSums(n), final)
		require.Equal(t, n, lines, "exactly once")
	})
}

// A task fails on a worker, later a whole worker dies and a new one joins:
// the job restarts from its latest checkpoint each time and the committed
// output counts every record once.
func TestClusterRecoversFromTaskAndWorkerFailures(t *testing.T) {
	const n = 200000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		out := filepath.Join(t.TempDir(), "out")
		var seen atomic.Int64
		var failed, killed atomic.Bool
		reached := make(chan struct{})
		var once sync.Once
		hook := func() {
			c := seen.Add(1)
			if c == 40000 && failed.CompareAndSwap(false, true) {
				panic("injected task failure")
			}
			if c >= 100000 && !killed.Load() {
				once.Do(func() { close(reached) })
				time.Sleep(10 * time.Microsecond) // throttle until the kill, not synchronisation
			}
		}
		res, err := runClusterCkpt(t, weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: s.Root()}, weir.ClusterConfig{}, weir.WorkerConfig{},
			func(env *weir.Environment) { buildClusterJob(env, n, out, hook) }, func(c *testCluster) {
				<-reached
				c.kill("w2")
				killed.Store(true)
				c.startWorker("w3")
			})
		require.NoError(t, err)
		require.GreaterOrEqual(t, res.Restarts, 2)
		require.Positive(t, res.Checkpoints.Completed)
		final, lines := readSums(t, out)
		require.Equal(t, wantSums(n), final)
		require.Equal(t, n, lines, "exactly once")
	})
}

func TestClusterRejectsWorkerOfAnotherJob(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ckpt := weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Dir: t.TempDir()})
	env := weir.NewEnvironment(ckpt, weir.WithCluster(weir.ClusterConfig{Listener: ln, WorkerTimeout: 2 * time.Second}))
	buildClusterJob(env, 10, t.TempDir(), nil)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)

	other := weir.NewEnvironment(ckpt, weir.WithParallelism(3))
	buildClusterJob(other, 10, t.TempDir(), nil)
	err = other.RunWorker(testCtx(t), weir.WorkerConfig{Coordinator: ln.Addr().String()})
	require.ErrorContains(t, err, "different job")
	require.ErrorIs(t, err, weir.ErrOtherJob)

	_, err = job.Wait()
	require.ErrorContains(t, err, "waiting for 1 workers")
}

// Both planes over TLS: the control plane with a server certificate, the
// data plane with mutual TLS between the workers.
func TestClusterOverTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "weir test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}

	const n = 20000
	out := filepath.Join(t.TempDir(), "out")
	res, err := runClusterWith(t,
		weir.ClusterConfig{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}},
		weir.WorkerConfig{TLS: &tls.Config{RootCAs: pool}, DataTLS: &tls.Config{Certificates: []tls.Certificate{cert},
			RootCAs: pool, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}},
		func(env *weir.Environment) { buildClusterJob(env, n, out, nil) }, nil)
	require.NoError(t, err)
	require.Zero(t, res.Restarts)
	final, lines := readSums(t, out)
	require.Equal(t, wantSums(n), final)
	require.Equal(t, n, lines)
}

// BenchmarkJobCluster is BenchmarkJobInProcess at parallelism 2 on a
// coordinator and two workers (in this process, each with its own network
// and data plane): the keyBy exchange crosses workers over TCP, and
// checkpoints are taken every 100 ms.
func BenchmarkJobCluster(b *testing.B) {
	b.ReportAllocs()
	res, err := runCluster(b, func(env *weir.Environment) { keyedSum(env, int64(b.N)) }, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(res.Checkpoints.Completed), "checkpoints")
}
