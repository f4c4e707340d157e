package dashboard

import (
	"bytes"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cpuTime is the process's CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:noinline
func spinForFlameGraph(n int) int {
	x := 0
	for i := range n {
		x += i * i % 7
	}
	return x
}

var sink int

// A real CPU profile parses into a tree whose frames add up: every frame
// is at least as wide as its callees, and the spinning function is in it.
func TestFlameGraphOfProfile(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, pprof.StartCPUProfile(&buf))
	start := cpuTime(t)
	for cpuTime(t)-start < 300*time.Millisecond {
		sink += spinForFlameGraph(1 << 20)
	}
	pprof.StopCPUProfile()
	g, err := flameGraphOf(buf.Bytes())
	require.NoError(t, err)
	require.Positive(t, g.Samples)
	require.Equal(t, "root", g.Root.Name)
	require.Positive(t, g.Root.Value)
	var found bool
	var check func(n *FlameNode)
	check = func(n *FlameNode) {
		var sum int64
		for _, c := range n.Children {
			sum += c.Value
			check(c)
		}
		require.LessOrEqual(t, sum, n.Value, n.Name)
		if strings.HasSuffix(n.Name, ".spinForFlameGraph") {
			found = true
		}
	}
	check(g.Root)
	require.True(t, found, "the spinning function is a frame")
}

func TestFlameGraphOfGarbage(t *testing.T) {
	_, err := flameGraphOf([]byte("not a profile"))
	require.ErrorContains(t, err, "parsing the CPU profile")
}
