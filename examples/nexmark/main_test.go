package main

import (
	"bufio"
	"context"
	"encoding/json"
	"hash/maphash"
	"os"
	"path/filepath"
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
			p.limit, p.restoreP = 15_000, 3
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

// -dump writes every event and every row as JSON lines with Nexmark's
// field names.
func TestDump(t *testing.T) {
	p := small("q2")
	p.events = 2000
	p.dump = t.TempDir()
	var out strings.Builder
	if err := run(t.Context(), p, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nexmark q2 backend=heap p=2 events=2000 ") || !strings.Contains(out.String(), "verified=true") {
		t.Fatalf("output: %s", out.String())
	}
	kinds := map[string]int{}
	lines := readLines(t, filepath.Join(p.dump, "events.jsonl"))
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		kinds[m["type"].(string)]++
		if _, ok := m["dateTime"].(float64); !ok {
			t.Fatalf("no dateTime: %s", l)
		}
	}
	if len(lines) != 2000 || kinds["person"] != 40 || kinds["auction"] != 120 || kinds["bid"] != 1840 {
		t.Fatalf("%d events: %v", len(lines), kinds)
	}
	for _, l := range readLines(t, filepath.Join(p.dump, "q2.jsonl")) {
		var r struct{ Auction, Price *int64 }
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Auction == nil || r.Price == nil || *r.Auction%123 != 0 {
			t.Fatalf("row %s: %v", l, err)
		}
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
