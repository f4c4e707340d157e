//go:build linux

package parquet_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/parquet"
)

// fsizeEnv marks the child process of TestFileTooLargeFailsJob.
const fsizeEnv = "WEIR_PARQUET_FSIZE_CHILD"

// A file system that refuses to grow a part file (the process's file size
// limit, RLIMIT_FSIZE, standing in for a full disk: writes past it fail
// with EFBIG as they would with ENOSPC) fails the job with the part
// file's path in the error; every file committed before is whole and
// holds no event twice, and the failed attempt's open files are removed.
// The limit is set in a child process running this test, so that it
// binds nothing else. Two cases: the write that fails is a row group in
// the middle of the input, or the footer at a checkpoint's pre-commit.
func TestFileTooLargeFailsJob(t *testing.T) {
	if os.Getenv(fsizeEnv) == "" {
		cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^TestFileTooLargeFailsJob$", "-test.v")
		cmd.Env = append(os.Environ(), fsizeEnv+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "child:\n%s", out)
		t.Logf("child:\n%s", out)
		require.Contains(t, string(out), "--- PASS: TestFileTooLargeFailsJob", "child:\n%s", out)
		return
	}
	const limit = 256 << 10
	var rl syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_FSIZE, &rl))
	rl.Cur = limit
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &rl))
	for _, tc := range []struct {
		name         string
		rowGroupSize int64
		interval     time.Duration
	}{
		{"row group", 32 << 10, time.Hour},                             // only the size decides: no file rolls before the limit
		{"footer at the checkpoint", 64 << 20, 200 * time.Millisecond}, // or at the final pre-commit
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			env := weir.NewEnvironment(weir.WithRestartStrategy(weir.NoRestart()),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: tc.interval, Dir: filepath.Join(dir, "chk")}))
			src := weir.FromGenerator(env, 1_000_000, func(i int64) event {
				e := genEvent(i)
				e.Key = strings.Repeat(string(rune('a'+i%26)), int(i%13)) // some bytes that do not compress away
				return e
			}).WithCodec(eventCodec)
			parquet.Sink(src, parquet.Config[event]{Dir: out, RowGroupSize: tc.rowGroupSize, Bucket: func(event, int64) string { return "b" }})
			_, err := env.Execute(testCtx(t))
			require.Error(t, err)
			require.ErrorContains(t, err, filepath.Join(out, "b", ".part-"))
			require.ErrorContains(t, err, "file too large")
			t.Log(err)
			seen := map[int64]bool{}
			files, hidden := readCommitted(t, out)
			for _, f := range files {
				for _, e := range f.events {
					require.False(t, seen[e.ID], "event %d twice", e.ID)
					seen[e.ID] = true
				}
			}
			for _, h := range hidden {
				fi, err := os.Stat(filepath.Join(out, h))
				require.NoError(t, err)
				require.Less(t, fi.Size(), int64(limit), "the part file that failed is removed, %s is a pending one", h)
			}
		})
	}
}
