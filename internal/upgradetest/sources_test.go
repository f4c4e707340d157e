package upgradetest_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/kafka"
	"github.com/weirstream/weir/state"
)

// otherReader reads base, base+1, …, base+n-1; its position is the index
// of the next value, 8 bytes like seqReader's: handed seqReader's
// positions it would silently skip its first values.
type otherReader struct{ base, next, n int64 }

func (r *otherReader) Next() (int64, bool, error) {
	if r.next >= r.n {
		return 0, false, nil
	}
	r.next++
	return r.base + r.next - 1, true, nil
}

func (r *otherReader) Position() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(r.next)), nil
}

func (r *otherReader) Seek(pos []byte) error {
	if len(pos) != 8 {
		return errors.New("otherReader: bad position")
	}
	r.next = int64(binary.BigEndian.Uint64(pos))
	return nil
}

// renamedSeqReader is seqReader under another type name that says it
// reads seqReader's positions.
type renamedSeqReader struct{ seqReader }

func (*renamedSeqReader) ReaderIdentity() string { return "*upgradetest_test.seqReader" }

// numbersJob reads its source's int64 values into a file sink ("src" and
// "sink" UIDs; uid overrides the source's).
func numbersJob(uid string, newReader func() weir.SourceReader[int64]) version {
	return version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, out string, th *throttle) {
		src := weir.FromReader(env, "numbers", func(int, int) (weir.SourceReader[int64], error) { return newReader(), nil }).
			Parallelism(1).UID(uid)
		lines := weir.Map(src, func(i int64) string { return strconv.FormatInt(i, 10) }).Parallelism(1)
		weir.FileSink(throttled(lines, th), out, func(s string) []byte { return []byte(s) }).UID("sink")
	}}
}

// A source whose reader was swapped for another under the same UID is
// refused at restore (weir.ErrSourceChanged, a state.ErrIncompatibleState)
// naming the source and both readers, before it commits anything: the
// new reader would read the old one's positions as its own. The new
// source under a new UID, with the old positions dropped
// (WithAllowNonRestoredState), reads from its start; a reader that says
// it reads the old positions (weir.ReaderIdentifier) takes them.
func TestSourceReaderChanged(t *testing.T) {
	const n, at, base = 3000, 1000, 100000
	v1 := numbersJob("src", func() weir.SourceReader[int64] { return &seqReader{n: n} })
	other := func() weir.SourceReader[int64] { return &otherReader{base: base, n: n} }
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			sp := takeSavepointOf(t, m.stop, at, v1)
			before := committed(t, sp.out)
			slices.Sort(before)

			got, _, err := sp.restoreOf(t, numbersJob("src", other))
			require.ErrorIs(t, err, weir.ErrSourceChanged)
			require.ErrorIs(t, err, state.ErrIncompatibleState)
			var sc *weir.SourceChangedError
			require.ErrorAs(t, err, &sc)
			require.Equal(t, weir.SourceChangedError{Source: "numbers", ID: "src", Checkpoint: sc.Checkpoint,
				Restored: "*upgradetest_test.seqReader", Now: "*upgradetest_test.otherReader"}, *sc)
			require.ErrorContains(t, err, "give the new source a new UID")
			for i, l := range got {
				require.Less(t, len(l), len(strconv.Itoa(base)), "the refused job committed only v1's values")
				require.True(t, i == 0 || got[i-1] != l, "once")
			}
			require.Subset(t, got, before)

			_, _, err = sp.restoreOf(t, numbersJob("src-v2", other))
			require.ErrorIs(t, err, weir.ErrNonRestoredState, "a new UID leaves the old positions unmatched")

			got, _, err = sp.restoreOf(t, numbersJob("src-v2", other), weir.WithAllowNonRestoredState(true))
			require.NoError(t, err)
			// v1's values up to the savepoint, then all of v2's.
			k := 0
			for _, l := range got {
				if len(l) < len(strconv.Itoa(base)) {
					k++
				}
			}
			require.Positive(t, k)
			require.Less(t, k, n)
			var want []string
			for i := range k {
				want = append(want, strconv.Itoa(i))
			}
			for i := range n {
				want = append(want, strconv.Itoa(base+i))
			}
			slices.Sort(want)
			requireLines(t, want, got)

			got, _, err = sp.restoreOf(t, numbersJob("src", func() weir.SourceReader[int64] { return &renamedSeqReader{seqReader{n: n}} }))
			require.NoError(t, err)
			requireLines(t, seqLines(n), got)
		})
	}
}

// A file source restored onto another file is refused (its positions are
// byte offsets into the old one), naming both paths; onto the same file
// it restores (TestRenamedSourcesAndSinksRestore).
func TestFileSourceOnAnotherFile(t *testing.T) {
	const n, at = 3000, 1000
	dir := t.TempDir()
	var content strings.Builder
	for i := range n {
		fmt.Fprintf(&content, "%d\n", i)
	}
	for _, f := range []string{"orders-2025.txt", "orders-2026.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(content.String()), 0o644))
	}
	job := func(file string) version {
		return version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, out string, th *throttle) {
			src := weir.FromFile(env, filepath.Join(dir, file)).Parallelism(1).UID("src")
			weir.FileSink(throttled(src, th), out, func(s string) []byte { return []byte(s) }).UID("sink")
		}}
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			sp := takeSavepointOf(t, m.stop, at, job("orders-2025.txt"))
			_, _, err := sp.restoreOf(t, job("orders-2026.txt"))
			require.ErrorIs(t, err, weir.ErrSourceChanged)
			require.ErrorContains(t, err, fmt.Sprintf(`written by reader "file %s", its reader now is "file %s"`,
				filepath.Join(dir, "orders-2025.txt"), filepath.Join(dir, "orders-2026.txt")))
		})
	}
}

// seqSplitReader reads 0, …, n-1 as one split "seq"; its position is the
// next value.
type seqSplitReader struct {
	seqReader
	splits *weir.Splits
}

func (r *seqSplitReader) Start(splits *weir.Splits) error {
	r.splits = splits
	splits.Add("seq")
	return nil
}

func (r *seqSplitReader) Poll() (weir.SplitRecord[string], weir.ReadStatus, error) {
	v, ok, err := r.Next()
	if err != nil || !ok {
		return weir.SplitRecord[string]{}, weir.EndOfInput, err
	}
	return weir.SplitRecord[string]{Value: strconv.FormatInt(v, 10), Split: "seq", Timestamp: v}, weir.Read, nil
}

func (r *seqSplitReader) Available() <-chan struct{} { return nil }

// A Kafka source replaced by another split reader under its UID (both
// are "split source"s) is refused: the new reader would decode Kafka's
// offsets as its own positions.
func TestKafkaSourceReplacedBySplitReader(t *testing.T) {
	const n, at = 3000, 1000
	addrs := startKafka(t, map[string]int32{"orders": 2})
	produceLines(t, addrs, "orders", 2, seqLines(n))
	kafkaJob := version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, out string, th *throttle) {
		src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"orders"},
			Deserializer: kafka.Values(func(b []byte) (string, error) { return string(b), nil })}).UID("orders")
		weir.FileSink(throttled(src, th), out, func(s string) []byte { return []byte(s) }).UID("sink")
	}}
	splitJob := version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, out string, th *throttle) {
		src := weir.FromSplitReader(env, "orders", weir.NoWatermarks[string](nil), func(int, int) (weir.SplitReader[string], error) {
			return &seqSplitReader{seqReader: seqReader{n: n}}, nil
		}).UID("orders")
		weir.FileSink(throttled(src, th), out, func(s string) []byte { return []byte(s) }).UID("sink")
	}}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			sp := takeSavepointOf(t, m.stop, at, kafkaJob)
			_, _, err := sp.restoreOf(t, splitJob)
			require.ErrorIs(t, err, weir.ErrSourceChanged)
			require.ErrorContains(t, err, `written by reader "kafka", its reader now is "*upgradetest_test.seqSplitReader"`)
		})
	}
}

// A source added to the job (a generator under a new UID, its values
// merged into the old source's) starts from its beginning in the
// restored job: every value of both sources is written once. (It had read
// nothing: a source without positions in the restore point took the
// rescale path with no positions.)
func TestSourceAdded(t *testing.T) {
	const n, at, base = 3000, 1000, 100000
	job := func(added bool) version {
		return version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, out string, th *throttle) {
			src := weir.FromReader(env, "numbers", func(int, int) (weir.SourceReader[int64], error) { return &seqReader{n: n}, nil }).
				Parallelism(1).UID("src")
			if added {
				more := weir.FromGenerator(env, n, func(i int64) int64 { return base + i }).Parallelism(1).UID("more")
				src = weir.Union(src, more)
			}
			lines := weir.Map(src, func(i int64) string { return strconv.FormatInt(i, 10) }).Parallelism(1).UID("lines")
			weir.FileSink(throttled(lines, th), out, func(s string) []byte { return []byte(s) }).UID("sink")
		}}
	}
	var want []string
	for i := range n {
		want = append(want, strconv.Itoa(i), strconv.Itoa(base+i))
	}
	slices.Sort(want)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			sp := takeSavepointOf(t, m.stop, at, job(false))
			got, _, err := sp.restoreOf(t, job(true))
			require.NoError(t, err)
			requireLines(t, want, got)
		})
	}
}

// A file source restored onto a file replaced under its path (a rotated
// log: other lines, as long or longer) or truncated below the restored
// offset is refused: its position holds a checksum of the bytes before
// the offset. A file that only grew restores and reads exactly the rest.
func TestFileSourceOnReplacedFile(t *testing.T) {
	const n, at = 3000, 1000
	dir := t.TempDir()
	path := filepath.Join(dir, "orders.txt")
	lines := func(format string, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, format, i)
		}
		return b.String()
	}
	job := version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, out string, th *throttle) {
		src := weir.FromFile(env, path).Parallelism(1).UID("src")
		weir.FileSink(throttled(src, th), out, func(s string) []byte { return []byte(s) }).UID("sink")
	}}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, []byte(lines("%d\n", n)), 0o644))
			sp := takeSavepointOf(t, m.stop, at, job)

			require.NoError(t, os.WriteFile(path, []byte(lines("r%d\n", 2*n)), 0o644)) // rotated: other lines
			_, _, err := sp.restoreOf(t, job)
			require.ErrorIs(t, err, weir.ErrSourceChanged)
			require.ErrorContains(t, err, "the bytes before the checkpoint's offset")

			require.NoError(t, os.WriteFile(path, []byte(lines("%d\n", 10)), 0o644)) // truncated
			_, _, err = sp.restoreOf(t, job)
			require.ErrorIs(t, err, weir.ErrSourceChanged)
			require.ErrorContains(t, err, "truncated or replaced")

			require.NoError(t, os.WriteFile(path, []byte(lines("%d\n", n+500)), 0o644)) // grown
			got, _, err := sp.restoreOf(t, job)
			require.NoError(t, err)
			requireLines(t, seqLines(n+500), got)
		})
	}
}
