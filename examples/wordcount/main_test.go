package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example checks its counts against a direct count, on the embedded
// text and on a file with words split across odd punctuation.
func TestWordCountVerifies(t *testing.T) {
	require.NoError(t, run("", 2, 3))
	f := filepath.Join(t.TempDir(), "text")
	require.NoError(t, os.WriteFile(f, []byte("'Tis the river's 'weir' -- ' '' the\nRIVER, river.\n\n"), 0o644))
	require.NoError(t, run(f, 3, 5))
}
