package multiinput_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
)

// runCluster runs the job build adds with a coordinator and two workers in
// this process, each with its own environment, network and data plane (as
// separate processes would), checkpoints every 20 ms into a shared
// directory.
func runCluster(t *testing.T, build func(env *weir.Environment)) (*weir.Result, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts := []weir.Option{weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithAutoWatermarkInterval(5 * time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: t.TempDir()})}
	env := weir.NewEnvironment(append(opts, weir.WithCluster(weir.ClusterConfig{Listener: ln, Workers: 2, Token: "secret", WorkerTimeout: 20 * time.Second}))...)
	build(env)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, id := range []string{"w1", "w2"} {
		wenv := weir.NewEnvironment(opts...)
		build(wenv)
		wg.Go(func() {
			errs[i] = wenv.RunWorker(testCtx(t), weir.WorkerConfig{Coordinator: ln.Addr().String(), ID: id, Token: "secret"})
		})
	}
	res, err := job.Wait()
	wg.Wait() // the coordinator shut the workers down
	for i, werr := range errs {
		if werr != nil && werr != context.Canceled {
			t.Errorf("worker %d: %v", i+1, werr)
		}
	}
	return res, err
}

// committedLines reads the lines of the committed part files in dir.
func committedLines(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var lines []string
	for _, e := range entries {
		require.False(t, strings.HasSuffix(e.Name(), ".inprogress"), "uncommitted file %s left", e.Name())
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		lines = append(lines, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	return slices.DeleteFunc(lines, func(s string) bool { return s == "" })
}
