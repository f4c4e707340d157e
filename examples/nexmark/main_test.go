package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// small are the parameters of the tests' runs: few events, at 1000
// events per second of event time (20 s of it: several windows and
// sessions), in out-of-order groups of 500 ms.
func small(query string) params {
	return params{query: query, events: 20_000, p: 2, backend: "heap", seed: 3, checkpoint: 50 * time.Millisecond,
		rate: 1000, disorder: 500, verify: true}
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
// did happen.
func TestQueriesVerifyWithKills(t *testing.T) {
	for _, q := range []string{"q1"} {
		t.Run(q, func(t *testing.T) {
			p := small(q)
			p.kill, p.limit = 2, 40_000
			if f := runOne(t, p); f.restarts < p.kill {
				t.Fatalf("%d restarts, want %d", f.restarts, p.kill)
			}
		})
	}
}

// A query stopped with a savepoint at parallelism 2 and restored at 3
// still verifies: the source and the state rescale.
func TestQueriesVerifyAfterRescale(t *testing.T) {
	for _, q := range []string{"q2"} {
		t.Run(q, func(t *testing.T) {
			p := small(q)
			p.limit, p.restoreP = 40_000, 3
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
