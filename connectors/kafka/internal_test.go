package kafka

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/weirstream/weir"
	"go.uber.org/zap"
)

// Every partition has exactly one owner, and a topic's partitions spread
// evenly over the subtasks.
func TestOwnerSpreadsPartitions(t *testing.T) {
	for par := 1; par <= 7; par++ {
		n := make([]int, par)
		for p := range int32(21) {
			o := owner(tp{"clicks", p}, par)
			require.True(t, o >= 0 && o < par)
			n[o]++
		}
		require.LessOrEqual(t, slices.Max(n)-slices.Min(n), 1, "parallelism %d: %v", par, n)
	}
}

func TestPositionRoundTrip(t *testing.T) {
	ps := []*partition{{tp: tp{"a", 0}, topicID: kadm.TopicID{1, 2, 3, 15: 16}, next: 5, stop: noStop, end: -1},
		{tp: tp{"b", 3}, next: 0, stop: 10, end: -1}}
	got, started, err := decodePosition(encodePosition(ps, true))
	require.NoError(t, err)
	require.True(t, started)
	require.Equal(t, ps, got)
	b := encodePosition(ps, false)
	for i := range len(b) {
		_, _, err := decodePosition(b[:i])
		require.ErrorIs(t, err, errCorruptPosition, "truncated at %d", i)
	}

	// Version 1 (before topic IDs): read, the IDs unknown (not checked).
	v1 := []byte{1, 1, 0, 0, 0, 1, 0, 1, 'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	got, started, err = decodePosition(v1)
	require.NoError(t, err)
	require.True(t, started)
	require.Equal(t, []*partition{{tp: tp{"a", 2}, next: 7, stop: noStop, end: -1}}, got)
}

// Restored at another parallelism, every partition of the old positions
// goes to exactly one new subtask, with its offsets.
func TestRescaleMovesPartitionsWithOffsets(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		oldPar, newPar := 1+rng.IntN(5), 1+rng.IntN(5)
		want := map[tp]int64{}
		old := make([][]byte, oldPar)
		byOwner := make([][]*partition, oldPar)
		for _, topic := range []string{"x", "y", "z"} {
			for p := range int32(rng.IntN(9)) {
				k := tp{topic, p}
				want[k] = rng.Int64N(1000)
				byOwner[owner(k, oldPar)] = append(byOwner[owner(k, oldPar)], &partition{tp: k, next: want[k], stop: noStop, end: -1})
			}
		}
		for i := range old {
			old[i] = encodePosition(byOwner[i], true)
		}
		got := map[tp]int64{}
		for sub := range newPar {
			r := &reader[string]{}
			require.NoError(t, r.Rescale(old, sub, newPar))
			require.True(t, r.restoredStarted)
			for k, p := range r.restored {
				_, dup := got[k]
				require.False(t, dup)
				got[k] = p.next
			}
		}
		require.Equal(t, want, got)
	}
}

func TestParseTxnID(t *testing.T) {
	for _, tc := range []struct {
		id       string
		sub      int
		ckpt     uint64
		matching bool
	}{
		{"job-3-17", 3, 17, true},
		{"job-0-0", 0, 0, true},
		{"job-x-1", 0, 0, false},
		{"job-1", 0, 0, false},
		{"job-2-0-5", 0, 0, false}, // a sink with prefix "job-2"
		{"other-1-2", 0, 0, false},
	} {
		sub, ckpt, ok := parseTxnID("job", tc.id)
		require.Equal(t, tc.matching, ok, tc.id)
		if ok {
			require.Equal(t, tc.sub, sub)
			require.Equal(t, tc.ckpt, ckpt)
		}
	}
}

func TestTxnCodec(t *testing.T) {
	for _, x := range []*txn{{TxnHandle: weir.TxnHandle{ID: "p-1-2", PreCommitted: true}, ProducerID: 77, Epoch: 3}, {TxnHandle: weir.TxnHandle{ID: "q", Empty: true, PreCommitted: true}}, {}} {
		got, err := txnCodec{}.Decode(txnCodec{}.Append(nil, x))
		require.NoError(t, err)
		require.Equal(t, x, got)
	}
	_, err := txnCodec{}.Decode([]byte{0, 5, 'a'})
	require.Error(t, err)
}

func newTestCommitter(addrs []string, prefix string, sub, par int) *committer[string] {
	cfg := &SinkConfig[string]{Brokers: addrs, Topic: "out", Guarantee: ExactlyOnce, TransactionalIDPrefix: prefix,
		Value: func(s string) ([]byte, error) { return []byte(s), nil }, TransactionTimeout: time.Minute,
		RequestTimeout: 10 * time.Second, Logger: zap.NewNop()}
	c := &committer[string]{cfg: cfg, sub: sub, par: par, log: cfg.Logger}
	c.promise = c.delivered
	return c
}

func readAll(t *testing.T, addrs []string, topic string) []string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	var out []string
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	slices.Sort(out)
	return out
}

// After a failover, a new committer commits the pre-committed transaction
// from its stored id, producer id and epoch; committing it again (a second
// failover) changes nothing. A pre-committed transaction the broker has
// aborted since is reported lost, never silently dropped, and its records
// never become visible.
func TestRecommitIsIdempotent(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	require.NoError(t, err)
	defer c.Close()
	addrs := c.ListenAddrs()

	first := newTestCommitter(addrs, "sink", 0, 1)
	tx, err := first.BeginAfter(4)
	require.NoError(t, err)
	require.Equal(t, "sink-0-5", tx.ID)
	require.NoError(t, first.Write(tx, "a"))
	require.NoError(t, first.Write(tx, "b"))
	require.NoError(t, first.PreCommit(tx))
	require.True(t, tx.PreCommitted)
	require.NoError(t, first.Close()) // the attempt dies before committing
	require.Empty(t, readAll(t, addrs, "out"))

	stored, err := txnCodec{}.Decode(txnCodec{}.Append(nil, tx))
	require.NoError(t, err)
	for range 2 {
		again := newTestCommitter(addrs, "sink", 0, 1)
		require.NoError(t, again.Commit(stored))
		require.NoError(t, again.Close())
		require.Equal(t, []string{"a", "b"}, readAll(t, addrs, "out"))
	}

	// A transaction fenced (aborted) before its commit is lost.
	lost := newTestCommitter(addrs, "sink", 0, 1)
	tx2, err := lost.BeginAfter(5)
	require.NoError(t, err)
	require.NoError(t, lost.Write(tx2, "c"))
	require.NoError(t, lost.PreCommit(tx2))
	require.NoError(t, lost.fence(tx2.ID))
	require.ErrorIs(t, lost.Commit(tx2), ErrTransactionLost)
	require.NoError(t, lost.Close())
	require.Equal(t, []string{"a", "b"}, readAll(t, addrs, "out"))
}

// The lingering cleanup aborts the open transactions of failed attempts
// named after later checkpoints, for the subtask indices this subtask
// answers for, and nothing else.
func TestAbortLingeringPicksItsOwn(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	require.NoError(t, err)
	defer c.Close()
	addrs := c.ListenAddrs()
	open := func(id string) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID(id))
		require.NoError(t, err)
		defer cl.Close()
		require.NoError(t, cl.BeginTransaction())
		require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: "out", Value: []byte(id)}).FirstErr())
	}
	// Subtask 1 of 2 answers for indices 1, 3, 5, ...
	for _, id := range []string{"s-1-3", "s-3-9", "s-1-2", "s-0-9", "s-5-4", "other-1-9"} {
		open(id)
	}
	cm := newTestCommitter(addrs, "s", 1, 2)
	require.NoError(t, cm.abortLingering(2))
	require.NoError(t, cm.Close())
	adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer adm.Close()
	lts, err := kadm.NewClient(adm).ListTransactions(t.Context(), nil, []string{"Ongoing"})
	require.NoError(t, err)
	var ongoing []string
	for id, lt := range lts {
		if lt.State == "Ongoing" {
			ongoing = append(ongoing, id)
		}
	}
	slices.Sort(ongoing)
	// s-1-2: checkpoint 2 is restored, not lingering; s-0-9: subtask 0's.
	require.Equal(t, []string{"other-1-9", "s-0-9", "s-1-2"}, ongoing)
}

// Restored with another TransactionalIDPrefix, the sink aborts the
// lingering transactions of the prefix its restored transactions were
// named with, as well as its own: left open, they would hold back
// read-committed readers until their timeout.
func TestAbortLingeringAfterPrefixChange(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	require.NoError(t, err)
	defer c.Close()
	addrs := c.ListenAddrs()
	for _, id := range []string{"old-0-3", "new-0-4", "other-0-5"} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID(id))
		require.NoError(t, err)
		require.NoError(t, cl.BeginTransaction())
		require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: "out", Value: []byte(id)}).FirstErr())
		cl.Close()
	}
	cm := newTestCommitter(addrs, "new", 0, 1)
	// The restore of checkpoint 2 aborts its open transaction, named with
	// the old prefix, then begins.
	require.NoError(t, cm.Abort(&txn{TxnHandle: weir.TxnHandle{ID: "old-0-3"}}))
	require.NoError(t, cm.abortLingering(2))
	require.NoError(t, cm.Close())
	adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer adm.Close()
	lts, err := kadm.NewClient(adm).ListTransactions(t.Context(), nil, nil)
	require.NoError(t, err)
	var ongoing []string
	for id, lt := range lts {
		if lt.State == "Ongoing" {
			ongoing = append(ongoing, id)
		}
	}
	require.Equal(t, []string{"other-0-5"}, ongoing)
}
