package weir_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
)

// A file read by the replayable file source and written by the exactly-once
// file sink, with failures injected: the committed part files hold every
// line exactly once.
func TestFileSourceToFileSinkExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	var sb strings.Builder
	const n = 30000
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "line-%d\n", i)
	}
	require.NoError(t, os.WriteFile(in, []byte(sb.String()), 0o644))
	out := filepath.Join(dir, "out")

	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: filepath.Join(dir, "chk")}))
	var seen, failures atomic.Int64
	lines := weir.Map(weir.FromFile(env, in), func(s string) string {
		if c := seen.Add(1); (c == 8000 || c == 21000) && failures.Add(1) <= 2 {
			panic("injected")
		}
		return strings.ToUpper(s)
	}).Rebalance()
	weir.FileSink(lines, out, func(s string) []byte { return []byte(s) })
	res, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, 2, res.Restarts)

	got := committedLines(t, out)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("LINE-%d", i)
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got)
}

// committedLines returns the lines of the file sink's committed part files
// in dir, failing the test if an uncommitted one is left.
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
