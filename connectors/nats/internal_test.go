package nats

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseAck(t *testing.T) {
	for _, tt := range []struct {
		reply   string
		seq, tm uint64
		ok      bool
	}{
		{"$JS.ACK.orders.c-0.1.42.7.1700000000123456789.3", 42, 1700000000123456789, true},
		{"$JS.ACK._.ACCHASH.orders.c-0.1.42.7.1700000000123456789.3.tok", 42, 1700000000123456789, true},
		{"$JS.ACK.dom.ACCHASH.orders.c-0.1.42.7.1700000000123456789.3", 42, 1700000000123456789, true},
		{"$JS.ACK.orders.c-0.1.42.7.17000.3.x", 0, 0, false}, // 8 tokens
		{"$JS.ACK.orders.c-0.1.x.7.17000.3", 0, 0, false},
		{"$JS.ACK.orders.c-0.1.0.7.17000.3", 0, 0, false},
		{"_INBOX.abc", 0, 0, false},
		{"", 0, 0, false},
	} {
		seq, tm, ok := parseAck(tt.reply)
		require.Equal(t, tt.ok, ok, tt.reply)
		if ok {
			require.Equal(t, tt.seq, seq, tt.reply)
			require.Equal(t, tt.tm, tm, tt.reply)
		}
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { parseAck("$JS.ACK.orders.c-0.1.42.7.1700000000123456789.3") }))
}

func TestSubjects(t *testing.T) {
	for _, s := range []string{"a", "a.b", "a.*", "a.>", "*", ">", "a.*.c"} {
		require.True(t, validSubject(s), s)
	}
	for _, s := range []string{"", "a.", ".a", "a..b", "a.>.b", "a.b*", "a b", "a.>x"} {
		require.False(t, validSubject(s), s)
	}
	match := map[[2]string]bool{
		{"a.b", "a.b"}: true, {"a.*", "a.b"}: true, {"a.>", "a.b.c"}: true, {">", "a"}: true,
		{"a.*", "a.b.c"}: false, {"a.b", "a.c"}: false, {"a.>", "a"}: false, {"a.*.c", "a.b.c"}: true, {"a.b", "a.b.c"}: false,
	}
	for fs, want := range match {
		require.Equal(t, want, subjectMatches(fs[0], fs[1]), "%v", fs)
	}
	overlap := map[[2]string]bool{
		{"a.*", "a.b"}: true, {"a.>", "a.b.c"}: true, {"a.*", "b.*"}: false, {"a.*", "a.*.c"}: false,
		{"a.0.>", "a.1.>"}: false, {"a.*.x", "a.y.*"}: true, {"a", "a.b"}: false,
	}
	for fs, want := range overlap {
		require.Equal(t, want, subjectsOverlap(fs[0], fs[1]), "%v", fs)
		require.Equal(t, want, subjectsOverlap(fs[1], fs[0]), "%v", fs)
	}
	require.True(t, coveredBy("in.a", []string{"x", "in.*"}))
	require.False(t, coveredBy("other", []string{"in.*"}))
	require.Zero(t, testing.AllocsPerRun(100, func() { subjectMatches("orders.*.>", "orders.3.eu.x") }))
}

func TestPositionRoundTrip(t *testing.T) {
	ss := []*split{{filter: "a.0", next: 5, stop: noStop}, {filter: "", next: 1, stop: 9}}
	got, started, created, err := decodePosition(encodePosition(ss, true, 1764806400123456789))
	require.NoError(t, err)
	require.True(t, started)
	require.Equal(t, int64(1764806400123456789), created)
	require.Len(t, got, 2)
	for i := range ss {
		require.Equal(t, ss[i].filter, got[i].filter)
		require.Equal(t, ss[i].next, got[i].next)
		require.Equal(t, ss[i].stop, got[i].stop)
	}
	b := encodePosition(ss, false, 7)
	for i := range len(b) {
		_, _, _, err := decodePosition(b[:i])
		require.Error(t, err, "truncated at %d", i)
	}
	_, _, _, err = decodePosition(append(b, 0))
	require.Error(t, err)

	// Version 1 (before the stream's creation time): read, not checked.
	v1 := []byte{1, 1, 0, 0, 0, 1, 0, 3, 'a', '.', '0', 0, 0, 0, 0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	got, started, created, err = decodePosition(v1)
	require.NoError(t, err)
	require.True(t, started)
	require.Zero(t, created)
	require.Len(t, got, 1)
	require.Equal(t, uint64(5), got[0].next)
	require.Equal(t, "a.0", got[0].filter)
}

// A savepoint of three subtasks restored at two: each filter goes to its
// new owner with its position.
func TestRescaleMovesSplitsWithPositions(t *testing.T) {
	filters := PartitionSubjects("p.%d", 5)
	cfg := &SourceConfig[string]{Subjects: filters}
	var positions [][]byte
	for sub := range 3 {
		var ss []*split
		for i, f := range filters {
			if owner(i, 3) == sub {
				ss = append(ss, &split{filter: f, next: uint64(100 + i), stop: noStop})
			}
		}
		positions = append(positions, encodePosition(ss, true, 42))
	}
	seen := map[string]bool{}
	for sub := range 2 {
		r := &reader[string]{cfg: cfg}
		require.NoError(t, r.Rescale(positions, sub, 2))
		require.True(t, r.restoredStarted)
		require.Equal(t, int64(42), r.restoredCreated)
		for f, s := range r.restored {
			i := indexOf(filters, f)
			require.Equal(t, sub, owner(i, 2), f)
			require.Equal(t, uint64(100+i), s.next)
			require.False(t, seen[f])
			seen[f] = true
		}
	}
	require.Len(t, seen, 5)
}

func TestTxnCodec(t *testing.T) {
	tx := &txn{Name: "p-1-7", Prepared: 1234}
	c := &committer[string]{cfg: &SinkConfig[string]{SubjectSelector: func(s string) string { return "s." + s },
		Value: func(s string) ([]byte, error) { return []byte(s), nil }, Guarantee: ExactlyOnce, MaxTransactionBytes: 1 << 20}}
	for _, v := range []string{"a", "bb", ""} {
		require.NoError(t, c.WriteTimestamped(tx, v, int64(len(v))))
	}
	b := txnCodec{}.Append([]byte("x"), tx)
	got, err := txnCodec{}.Decode(b[1:])
	require.NoError(t, err)
	require.Equal(t, tx.Name, got.Name)
	require.Equal(t, 3, got.N)
	require.Equal(t, int64(1234), got.Prepared)
	var recs []string
	require.NoError(t, got.each(func(subj string, ts int64, data []byte) error {
		recs = append(recs, subj+"|"+string(data)+"|"+string(rune('0'+ts)))
		return nil
	}))
	require.Equal(t, []string{"s.a|a|1", "s.bb|bb|2", "s.||0"}, recs)
	for i := range len(b) - 1 {
		_, err := txnCodec{}.Decode(b[1 : 1+i])
		require.Error(t, err, "truncated at %d", i)
	}
	// A transaction over its bound fails the write.
	c.cfg.MaxTransactionBytes = 40
	require.ErrorContains(t, c.WriteTimestamped(tx, "this is too long for the bound", 0), "exceed MaxTransactionBytes")
}

// The message IDs of a transaction are prefix-0, prefix-1, … across the
// strings they are cut from: a commit repeated after a restore must
// publish under the same IDs as the first.
func TestMsgIDs(t *testing.T) {
	ids := msgIDs{prefix: "job-1-7"}
	for i := range 3*idsPerString + 5 {
		if got, want := ids.next(), "job-1-7-"+strconv.Itoa(i); got != want {
			t.Fatalf("id %d: %q, want %q", i, got, want)
		}
	}
}
