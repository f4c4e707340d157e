package upgradetest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/kafka"
	"github.com/weirstream/weir/state"
)

// seqLines are the lines "0" to "n-1", sorted as strings.
func seqLines(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	slices.Sort(out)
	return out
}

// An operator's kind is its implementation, not its name: a source
// renamed (FromReader's name, a file source's), and a sink renamed
// restore their state, with UIDs and without (their generated IDs do not
// hash names either), and the two versions together write every value
// exactly once. (A file source on another file is refused:
// TestSourceReaderChanged.)
func TestRenamedSourcesAndSinksRestore(t *testing.T) {
	const n, at = 3000, 1000
	dir := t.TempDir()
	var content strings.Builder
	for i := range n {
		fmt.Fprintf(&content, "%d\n", i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "orders.txt"), []byte(content.String()), 0o644))
	type names struct{ source, sink string }
	job := func(nm names, uids, file bool) version {
		return version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, out string, th *throttle) {
			var src *weir.Stream[string]
			if file {
				src = weir.FromFile(env, filepath.Join(dir, "orders.txt")).Parallelism(1).Name(nm.source)
				if uids {
					src.UID("src")
				}
			} else {
				seq := weir.FromReader(env, nm.source, func(int, int) (weir.SourceReader[int64], error) {
					return &seqReader{n: n}, nil
				}).Parallelism(1)
				if uids {
					seq.UID("src")
				}
				src = weir.Map(seq, func(i int64) string { return strconv.FormatInt(i, 10) }).Parallelism(1)
			}
			sink := weir.FileSink(throttled(src, th), out, func(s string) []byte { return []byte(s) }).Name(nm.sink)
			if uids {
				sink.UID("sink")
			}
		}}
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for _, file := range []bool{false, true} {
				for _, uids := range []bool{true, false} {
					t.Run(fmt.Sprintf("file=%v/uids=%v", file, uids), func(t *testing.T) {
						v1 := job(names{"orders", "orders out"}, uids, file)
						v2 := job(names{"orders (EU and US)", "archive"}, uids, file)
						sp := takeSavepointOf(t, m.stop, at, v1)
						got, _, err := sp.restoreOf(t, v2)
						require.NoError(t, err)
						requireLines(t, seqLines(n), got)
					})
				}
			}
		})
	}
}

// startKafka starts an in-process Kafka broker with the topics (name →
// partitions) and returns its addresses.
func startKafka(t *testing.T, topics map[string]int32) []string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for name, p := range topics {
		_, err := adm.CreateTopic(testCtx(t), p, 1, nil, name)
		require.NoError(t, err)
	}
	return addrs
}

// produceLines writes vals to topic, the i-th to partition i%partitions.
func produceLines(t *testing.T, addrs []string, topic string, partitions int32, vals []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	recs := make([]*kgo.Record, len(vals))
	for i, v := range vals {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(v)}
	}
	require.NoError(t, cl.ProduceSync(testCtx(t), recs...).FirstErr())
}

// A Kafka source whose topic list changed (its name lists its topics)
// restores its offsets of the topics it read, with a UID and without, and
// reads the added topic from its start: every record of both topics is
// written once.
func TestKafkaSourceTopicsChanged(t *testing.T) {
	const na, nb, at = 3000, 500, 1000
	addrs := startKafka(t, map[string]int32{"orders": 2, "refunds": 2})
	var want []string
	for _, tp := range []struct {
		name string
		n    int
	}{{"orders", na}, {"refunds", nb}} {
		vals := make([]string, tp.n)
		for i := range vals {
			vals[i] = fmt.Sprintf("%s-%d", tp.name, i)
		}
		produceLines(t, addrs, tp.name, 2, vals)
		want = append(want, vals...)
	}
	slices.Sort(want)
	// v1 reads on (a bounded source could finish before its savepoint);
	// v2 stops at the ends.
	job := func(uids bool, topics ...string) version {
		return version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, out string, th *throttle) {
			src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: topics, Bounded: th.reached == nil,
				Deserializer: kafka.Values(func(b []byte) (string, error) { return string(b), nil })})
			sink := weir.FileSink(throttled(src, th), out, func(s string) []byte { return []byte(s) })
			if uids {
				src.UID("orders")
				sink.UID("sink")
			}
		}}
	}
	for _, m := range modes {
		for _, uids := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/uids=%v", m.name, uids), func(t *testing.T) {
				sp := takeSavepointOf(t, m.stop, at, job(uids, "orders"))
				got, _, err := sp.restoreOf(t, job(uids, "orders", "refunds"))
				require.NoError(t, err)
				requireLines(t, want, got)
			})
		}
	}
}

// ledger is a transactional store for a two-phase-commit sink: a
// transaction's values are visible once committed. Committing a
// transaction it never began is an error (a handle restored wrong).
type ledger struct {
	mu        sync.Mutex
	next      atomic.Int64
	open      map[string][]string
	committed map[string][]string
	restored  atomic.Int64 // transactions committed that an earlier job began
	gen       string       // the job's prefix of transaction IDs
}

func newLedger() *ledger {
	return &ledger{open: map[string][]string{}, committed: map[string][]string{}}
}

func (l *ledger) values() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, vs := range l.committed {
		out = append(out, vs...)
	}
	slices.Sort(out)
	return out
}

// ledgerCommitter commits into a ledger, with transaction handles of type
// Txn: id and of convert between a handle and its ID.
type ledgerCommitter[Txn any] struct {
	l  *ledger
	id func(Txn) string
	of func(string) Txn
}

func (c ledgerCommitter[Txn]) Begin() (Txn, error) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	id := fmt.Sprintf("%s-%d", c.l.gen, c.l.next.Add(1))
	c.l.open[id] = []string{}
	return c.of(id), nil
}

func (c ledgerCommitter[Txn]) Write(txn Txn, v string) error {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	vs, ok := c.l.open[c.id(txn)]
	if !ok {
		return fmt.Errorf("ledger: write to unknown transaction %q", c.id(txn))
	}
	c.l.open[c.id(txn)] = append(vs, v)
	return nil
}

func (c ledgerCommitter[Txn]) PreCommit(Txn) error { return nil }

func (c ledgerCommitter[Txn]) Commit(txn Txn) error {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	id := c.id(txn)
	if _, done := c.l.committed[id]; done {
		return nil
	}
	vs, ok := c.l.open[id]
	if !ok {
		return fmt.Errorf("ledger: commit of unknown transaction %q", id)
	}
	if !strings.HasPrefix(id, c.l.gen+"-") {
		c.l.restored.Add(1)
	}
	c.l.committed[id] = vs
	delete(c.l.open, id)
	return nil
}

func (c ledgerCommitter[Txn]) Abort(txn Txn) error {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	delete(c.l.open, c.id(txn))
	return nil
}

// ledgerTxn is v2's transaction handle: v1's was the ID alone.
type ledgerTxn struct {
	ID    string
	Retry int
}

var ledgerTxnCodec = codec.Struct2(codec.String(), func(t ledgerTxn) string { return t.ID }, codec.Int(), func(t ledgerTxn) int { return t.Retry },
	func(id string, r int) ledgerTxn { return ledgerTxn{id, r} })

// A two-phase-commit sink restored with another transaction type (v1's
// handles are strings, v2's structs) is refused before it commits or
// aborts anything, naming the sink and both codecs; with a codec that
// evolves from v1's (codec.Evolve), the restored job migrates the handles
// and commits v1's pending transactions itself, and every value is
// committed once.
func TestTwoPhaseCommitTransactionTypeChanged(t *testing.T) {
	const n, at = 3000, 1000
	source := func(env *weir.Environment, th *throttle) *weir.Stream[string] {
		src := weir.FromGenerator(env, n, func(i int64) string { return strconv.FormatInt(i, 10) }).Parallelism(1).UID("src")
		return throttled(src, th)
	}
	v1 := func(l *ledger) version {
		return version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, _ string, th *throttle) {
			weir.TwoPhaseCommitSink(source(env, th), nil, func(int, int) (weir.TwoPhaseCommitter[string, string], error) {
				return ledgerCommitter[string]{l: l, id: func(s string) string { return s }, of: func(s string) string { return s }}, nil
			}).UID("sink").Name("ledger")
		}}
	}
	v2 := func(l *ledger, c codec.Codec[ledgerTxn]) version {
		return version{opts: []weir.Option{weir.WithParallelism(2)}, build: func(env *weir.Environment, _ string, th *throttle) {
			weir.TwoPhaseCommitSink(source(env, th), c, func(int, int) (weir.TwoPhaseCommitter[string, ledgerTxn], error) {
				return ledgerCommitter[ledgerTxn]{l: l, id: func(t ledgerTxn) string { return t.ID }, of: func(s string) ledgerTxn { return ledgerTxn{ID: s} }}, nil
			}).UID("sink").Name("ledger")
		}}
	}
	evolved := codec.Evolve[ledgerTxn](ledgerTxnCodec, codec.String(), func(id string) ledgerTxn { return ledgerTxn{ID: id, Retry: -1} })
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLedger()
			l.gen = "v1"
			sp := takeSavepointOf(t, m.stop, at, v1(l))
			l.mu.Lock()
			before := len(l.committed)
			l.mu.Unlock()

			l.gen = "v2"
			_, _, err := sp.restoreOf(t, v2(l, ledgerTxnCodec))
			require.ErrorIs(t, err, state.ErrIncompatibleState)
			require.ErrorContains(t, err, `operator ledger: state "2pc-transactions" restored from the checkpoint as operator list (split) of `+
				`2pc-transaction(string), declared now as operator list (split) of 2pc-transaction(struct2[upgradetest_test.ledgerTxn](string,int))`)
			require.Zero(t, l.restored.Load(), "nothing of v1 was committed by the refused job")
			l.mu.Lock()
			require.Len(t, l.committed, before, "the refused job committed nothing")
			l.mu.Unlock()

			_, _, err = sp.restoreOf(t, v2(l, evolved))
			require.NoError(t, err)
			requireLines(t, seqLines(n), l.values())
			if !m.stop {
				require.Positive(t, l.restored.Load(), "v2 commits the savepoint's transactions that v1 began")
			}
		})
	}
}
