package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/nexmark/internal/batch"
	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
	"github.com/weirstream/weir/examples/nexmark/internal/queries"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// small are the parameters of the tests' runs: few events, at 500
// events per second of event time (20 s of it: several windows and
// sessions of every query), in out-of-order groups of 1 s.
func small(query string) params {
	return params{query: query, events: 10_000, p: 2, backend: "heap", seed: 3, checkpoint: 50 * time.Millisecond,
		rate: 500, disorder: 500, verify: true}
}

func runOne(t *testing.T, p params) figures {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a guard against a hang
	defer cancel()
	f, err := queryList[p.query](ctx, p)
	if err != nil {
		t.Fatalf("%s: %v", p.query, err)
	}
	if !f.verified || f.rows == 0 {
		t.Fatalf("%s: verified=%t with %d rows", p.query, f.verified, f.rows)
	}
	return f
}

// Every query's streaming output equals the batch computation's, at
// parallelism 2 (run returns an error on any difference).
func TestQueriesVerify(t *testing.T) {
	for _, q := range queryOrder {
		t.Run(q, func(t *testing.T) { runOne(t, small(q)) })
	}
}

// Under injected failures the output is still exact, and the failures
// did happen: sliding windows on hot auctions (q5), sessions (q11), and
// the updates of the winning bids (q9).
func TestQueriesVerifyWithKills(t *testing.T) {
	for _, q := range []string{"q5", "q11", "q9"} {
		t.Run(q, func(t *testing.T) {
			p := small(q)
			p.kill, p.limit = 2, 15_000
			if f := runOne(t, p); f.restarts < p.kill {
				t.Fatalf("%d restarts, want %d", f.restarts, p.kill)
			}
		})
	}
}

// A query stopped with a savepoint at parallelism 2 and restored at 3
// still verifies: the source, the sessions and the collected rows
// rescale.
func TestQueriesVerifyAfterRescale(t *testing.T) {
	for _, q := range []string{"q11"} {
		t.Run(q, func(t *testing.T) {
			p := small(q)
			// 2.5 s of input: the job is still running when the
			// savepoint comes on a loaded machine (at 15,000 events/s
			// a loaded -race run finished first).
			p.limit, p.restoreP = 4_000, 3
			p.savepoint = func(j *weir.Job) (string, error) {
				deadline := time.Now().Add(time.Minute)
				for j.CheckpointStats().Completed < 2 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond) // polls the job's progress; no result depends on it
				}
				return j.StopWithSavepoint(t.Context(), filepath.Join(t.TempDir(), "sp"))
			}
			runOne(t, p)
		})
	}
}

func readLines(t *testing.T, path string) []string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		out = append(out, s.Text())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Bad flags are errors, not panics.
func TestBadParams(t *testing.T) {
	for _, p := range []params{
		{query: "q99"},
		{query: "q0", backend: "tape", p: 1, events: 10, checkpoint: time.Second, verify: true},
		{query: "q0", backend: "heap", p: 1, events: 10, checkpoint: time.Second, rate: -5, verify: true},
	} {
		if err := run(t.Context(), p, &strings.Builder{}); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}

// The comparisons catch a changed, missing or repeated row.
func TestChecksFail(t *testing.T) {
	g, err := nexmark.New(small("q9").generator())
	if err != nil {
		t.Fatal(err)
	}
	events := batch.Events(g, 5000)
	q2, q4, q9 := batch.Q2(events), batch.Q4(events), batch.Q9(events)
	if len(q2) < 2 || len(q4) < 2 || len(q9) < 2 {
		t.Fatalf("%d, %d, %d rows", len(q2), len(q4), len(q9))
	}
	seed := maphash.MakeSeed()
	fps := func(rows []queries.Q2Row) []uint64 {
		var out []uint64
		for _, r := range rows {
			out = append(out, maphash.Comparable(seed, r))
		}
		return out
	}
	changed := slices.Clone(q2)
	changed[0].Price++
	for what, err := range map[string]error{
		"same q2":      sameFingerprints(fps(q2), q2, seed),
		"same q2 rows": sameRows(q2, q2),
		"same q4":      checkQ4(q4, q4),
		"same q9":      checkQ9(q9, q9),
	} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	worse := q9[0]
	worse.Price--
	outside := q9[0]
	outside.BidDateTime = outside.Expires + 1
	if err := checkQ9(append([]queries.Q9Row{worse}, q9...), q9); err != nil {
		t.Errorf("an update before the winner: %v", err)
	}
	for what, err := range map[string]error{
		"changed q2 fingerprint": sameFingerprints(fps(changed), q2, seed),
		"missing q2 fingerprint": sameFingerprints(fps(q2[1:]), q2, seed),
		"changed q2 row":         sameRows(changed, q2),
		"extra q2 row":           sameRows(append(slices.Clone(q2), q2[0]), q2),
		"q4 last row wrong":      checkQ4(append(slices.Clone(q4), queries.Q4Row{ID: q4[0].ID, Final: q4[0].Final + 1}), q4),
		"q4 same value twice":    checkQ4(append(slices.Clone(q4), q4[len(q4)-1]), q4),
		"q4 category missing":    checkQ4(q4[1:], q4),
		"q9 row twice":           checkQ9(append(slices.Clone(q9), q9[0]), q9),
		"q9 winner missing":      checkQ9(append([]queries.Q9Row{worse}, q9[1:]...), q9),
		"q9 bid outside":         checkQ9(append([]queries.Q9Row{outside}, q9...), q9),
		"q9 auction missing":     checkQ9(q9[1:], q9),
	} {
		if err == nil {
			t.Errorf("%s: no error", what)
		}
	}
}

// -dump writes what an independent checker sees: this test recomputes
// q2 (a filter), q4 (an updating join and aggregate) and q5 (sliding
// windows on hot auctions) from events.jsonl alone, with nothing of the
// example's code (only the field names the issue gives), and compares
// them with q2.jsonl and q5.jsonl (every row) and q4.jsonl (the last row
// of each category: an update is a new row). It also checks that each
// event line has exactly its kind's fields, and the figure lines.
func TestDumpRecomputed(t *testing.T) {
	p := small("q2,q4,q5")
	p.events = 5000 // 10 s of event time: several windows
	p.dump = t.TempDir()
	var out strings.Builder
	if err := run(t.Context(), p, &out); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q2", "q4", "q5"} {
		line := regexp.MustCompile(`(?m)^nexmark ` + q + ` backend=heap p=2 events=5000 wall=[0-9]+\.[0-9]{2}s events/s=[0-9]+ events/s/core=[0-9]+ verified=true$`)
		if !line.MatchString(out.String()) {
			t.Fatalf("no figure line for %s in:\n%s", q, out.String())
		}
	}
	fields := map[string]string{
		"person":  "city creditCard dateTime emailAddress extra id name state type",
		"auction": "category dateTime description expires extra id initialBid itemName reserve seller type",
		"bid":     "auction bidder channel dateTime extra price type url",
	}
	type event struct {
		Type                            string
		ID, DateTime, Expires, Category int64
		Auction, Price                  int64
		Seller, Bidder, InitialBid      int64
		Reserve                         int64
		Name, EmailAddress, CreditCard  string
		City, State, ItemName, Extra    string
		Description, Channel, URL       string
	}
	var events []event
	for i, l := range readLines(t, filepath.Join(p.dump, "events.jsonl")) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		keys := slices.Sorted(maps.Keys(m))
		var e event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got := strings.Join(keys, " "); got != fields[e.Type] {
			t.Fatalf("event %d (%s): fields %s, want %s", i, e.Type, got, fields[e.Type])
		}
		events = append(events, e)
	}
	kinds := map[string]int{}
	for _, e := range events {
		kinds[e.Type]++
	}
	if len(events) != 5000 || kinds["person"] != 100 || kinds["auction"] != 300 || kinds["bid"] != 4600 {
		t.Fatalf("%d events: %v", len(events), kinds)
	}

	// q2: the auction and price of the bids on every 123rd auction.
	var want []string
	for _, e := range events {
		if e.Type == "bid" && e.Auction%123 == 0 {
			want = append(want, fmt.Sprintf(`{"auction":%d,"price":%d}`, e.Auction, e.Price))
		}
	}
	sameLines(t, "q2", readLines(t, filepath.Join(p.dump, "q2.jsonl")), want, 10)

	// q4: per auction, the highest price of its bids dated within
	// [dateTime, expires]; per category, the integer average.
	auctions := map[int64]event{}
	for _, e := range events {
		if e.Type == "auction" {
			auctions[e.ID] = e
		}
	}
	final := map[int64]int64{}
	for _, e := range events {
		if a, ok := auctions[e.Auction]; ok && e.Type == "bid" && e.DateTime >= a.DateTime && e.DateTime <= a.Expires {
			final[a.ID] = max(final[a.ID], e.Price)
		}
	}
	sum, n := map[int64]int64{}, map[int64]int64{}
	for id, price := range final {
		sum[auctions[id].Category] += price
		n[auctions[id].Category]++
	}
	last := map[int64]int64{}
	for i, l := range readLines(t, filepath.Join(p.dump, "q4.jsonl")) {
		var r struct{ ID, Final *int64 }
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.ID == nil || r.Final == nil {
			t.Fatalf("q4 row %d %s: %v", i, l, err)
		}
		last[*r.ID] = *r.Final
	}
	if len(last) != len(sum) || len(sum) < 2 {
		t.Fatalf("q4: %d categories, recomputed %d", len(last), len(sum))
	}
	for c, s := range sum {
		if got, ok := last[c]; !ok || got != s/n[c] {
			t.Errorf("q4 category %d: last row %d (present %t), recomputed %d", c, got, ok, s/n[c])
		}
	}

	// q5: per window [s, s+10 s), s a multiple of 2 s, the auctions with
	// the most bids.
	type win struct{ start, auction int64 }
	counts := map[win]int64{}
	most := map[int64]int64{}
	for _, e := range events {
		if e.Type != "bid" {
			continue
		}
		for s := e.DateTime - e.DateTime%2000; s > e.DateTime-10_000; s -= 2000 {
			counts[win{s, e.Auction}]++
			most[s] = max(most[s], counts[win{s, e.Auction}])
		}
	}
	want = nil
	for w, c := range counts {
		if c == most[w.start] {
			want = append(want, fmt.Sprintf(`{"auction":%d,"num":%d,"starttime":%d,"endtime":%d}`, w.auction, c, w.start, w.start+10_000))
		}
	}
	sameLines(t, "q5", readLines(t, filepath.Join(p.dump, "q5.jsonl")), want, 5)
}

// sameLines fails t unless got and want hold the same lines, at least
// atLeast of them, in any order.
func sameLines(t *testing.T, what string, got, want []string, atLeast int) {
	t.Helper()
	slices.Sort(got)
	slices.Sort(want)
	if len(want) < atLeast || !slices.Equal(got, want) {
		t.Fatalf("%s: %d rows, recomputed %d:\n%v\n%v", what, len(got), len(want), got, want)
	}
}
