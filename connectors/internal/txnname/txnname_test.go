package txnname

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOldPrefixes(t *testing.T) {
	var o OldPrefixes
	_, ok := o.Note("new", "new-0-3")
	require.False(t, ok, "the current prefix")
	p, ok := o.Note("new", "old-a-1-7")
	require.True(t, ok)
	require.Equal(t, "old-a", p)
	_, ok = o.Note("new", "old-a-0-8")
	require.False(t, ok, "recorded already")
	for _, bad := range []string{"", "x", "x-1", "-1-2"} {
		_, ok = o.Note("new", bad)
		require.False(t, ok, bad)
	}
	require.Equal(t, OldPrefixes{"old-a"}, o)
}
