package parquet_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/internal/connectortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testCtx = connectortest.Context

// event is the record type of the tests: its Parquet schema comes from
// the struct.
type event struct {
	ID   int64  `parquet:"id"`
	Key  string `parquet:"key,dict"`
	Time int64  `parquet:"time,timestamp(millisecond)"`
}

var eventCodec = codec.Struct3(codec.Int64(), func(e event) int64 { return e.ID },
	codec.String(), func(e event) string { return e.Key },
	codec.Int64(), func(e event) int64 { return e.Time },
	func(id int64, k string, ts int64) event { return event{ID: id, Key: k, Time: ts} })

// t0 is the event time of the first event: 2026-01-02 03:00 UTC.
var t0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC).UnixMilli()

// genEvent is event i: its event time advances 1 s per event, so the
// default buckets change every 3600 events.
func genEvent(i int64) event {
	return event{ID: i, Key: fmt.Sprintf("k%d", i%17), Time: t0 + i*1000}
}

// committedFile is one committed part file read back.
type committedFile struct {
	rel    string // path relative to the sink's directory
	size   int64
	events []event
}

// readCommitted reads every committed part file under dir with
// parquet-go, and returns the hidden files it found beside them.
func readCommitted(t testing.TB, dir string) (files []committedFile, hidden []string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
			hidden = append(hidden, rel)
			return nil
		}
		evs, err := pq.ReadFile[event](path)
		if err != nil {
			return fmt.Errorf("committed file %s: %w", rel, err)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, committedFile{rel: rel, size: fi.Size(), events: evs})
		return nil
	})
	require.NoError(t, err)
	return files, hidden
}

// requireExactlyOnce checks that files hold events 0..n-1 once each, as
// genEvent made them.
func requireExactlyOnce(t testing.TB, files []committedFile, n int64) {
	t.Helper()
	seen := make([]int, n)
	for _, f := range files {
		for _, e := range f.events {
			require.True(t, e.ID >= 0 && e.ID < n, "event %d in %s out of range", e.ID, f.rel)
			require.Equal(t, genEvent(e.ID), e, "file %s", f.rel)
			seen[e.ID]++
		}
	}
	var lost, dup []int64
	for i, c := range seen {
		switch {
		case c == 0:
			lost = append(lost, int64(i))
		case c > 1:
			dup = append(dup, int64(i))
		}
	}
	require.Empty(t, lost, "lost events (%d)", len(lost))
	require.Empty(t, dup, "duplicated events (%d)", len(dup))
}

func mustWrite(t testing.TB, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("leftover"), 0o644))
}
