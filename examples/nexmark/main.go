// Command nexmark runs the Nexmark benchmark's queries on weir: it
// generates the events in the job (nexmark.Source), runs one query or all
// of them, verifies every query's output against a batch computation of
// the same events in plain Go (package batch), and prints its figures,
// one line per query:
//
//	nexmark q5 backend=heap p=1 events=1000000 wall=1.23s events/s=813008 events/s/core=452000 verified=true
//
// events/s is the events over the job's wall time; events/s/core the
// events over the CPU time (user + system) the process spent while the
// job ran. Checkpoints are exactly-once, every -checkpoint; -kill N
// injects N task failures (each after a checkpoint completed), and the
// output must still verify exactly. -dump DIR writes DIR/events.jsonl
// (every event, one JSON object a line) and DIR/<query>.jsonl (the
// query's rows; an update is a new row).
//
//	go run ./examples/nexmark -query q5 -events 1000000
//	go run ./examples/nexmark -query all -events 200000 -kill 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"
)

func main() {
	var p params
	flag.StringVar(&p.query, "query", "all", "the query to run (q0, q1, …) or all")
	flag.Int64Var(&p.events, "events", 1_000_000, "events to generate")
	flag.IntVar(&p.p, "p", 1, "parallelism")
	flag.StringVar(&p.backend, "backend", "heap", "state backend: heap or pebble")
	flag.Uint64Var(&p.seed, "seed", 1, "generator seed")
	flag.DurationVar(&p.checkpoint, "checkpoint", 10*time.Second, "checkpoint interval (with -kill: 200ms unless set)")
	flag.IntVar(&p.kill, "kill", 0, "task failures to inject")
	flag.Int64Var(&p.rate, "rate", 10_000_000, "events per second of event time (the generator's rate)")
	flag.Float64Var(&p.limit, "limit", 0, "events per second of wall time, all source subtasks together (0: no limit; with -kill: events/4 unless set)")
	flag.Int64Var(&p.disorder, "disorder", 1, "out-of-order group size of the generator (1: in order)")
	flag.StringVar(&p.dump, "dump", "", "directory to write events.jsonl and <query>.jsonl to")
	flag.BoolVar(&p.verify, "verify", true, "verify the output against the batch computation (false: discard it)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the runs to this file")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if p.kill > 0 && !set["checkpoint"] {
		p.checkpoint = 200 * time.Millisecond
	}
	if p.kill > 0 && !set["limit"] {
		// Long enough for checkpoints to complete between the failures.
		p.limit = float64(p.events) / 4
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "nexmark:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(context.Background(), p, os.Stdout); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "nexmark:", err)
		os.Exit(1)
	}
}

// run runs the queries p names, in turn; the first that fails to run or
// to verify ends it.
func run(ctx context.Context, p params, out io.Writer) error {
	names, err := selectQueries(p.query)
	if err != nil {
		return err
	}
	if p.dump != "" {
		if err := dumpEvents(p); err != nil {
			return err
		}
	}
	for _, name := range names {
		f, err := queryList[name](ctx, p)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintln(out, f.String())
		if f.note != "" {
			fmt.Fprintf(out, "  %s\n", f.note)
		}
	}
	return nil
}

func selectQueries(q string) ([]string, error) {
	if q == "all" {
		return queryOrder, nil
	}
	var names []string
	for _, n := range strings.Split(q, ",") {
		if _, ok := queryList[n]; !ok {
			return nil, fmt.Errorf("unknown query %q (have %s, all)", n, strings.Join(queryOrder, ", "))
		}
		names = append(names, n)
	}
	return names, nil
}
