package weirtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
)

var (
	flagSeed = flag.Uint64("weirtest.seed", 0, "run only this seed (reproduces a failure weirtest reported)")
	flagRuns = flag.Int("weirtest.runs", 0, "seeds to run per weirtest.Run call (overrides Config.Seeds)")
)

// Config configures a series of runs. Zero values mean the defaults.
type Config struct {
	// Seeds is how many seeds to run (default 3), from FirstSeed (default
	// 1) on; the -weirtest.runs flag overrides it, and -weirtest.seed
	// runs that one seed only.
	Seeds     int
	FirstSeed uint64
	// Mode is the job's guarantee: weir.ExactlyOnce (default) or
	// weir.AtLeastOnce, under which only lost values fail a run.
	Mode barrier.Mode
	// Unaligned takes unaligned checkpoints; TCP runs the job's exchanges
	// over TCP connections (weir.WithTCPExchanges), which adds the
	// ConnReset fault.
	Unaligned, TCP bool
	// Kinds are the fault kinds to draw from (default: all that apply).
	Kinds Kinds
	// MinFaults and MaxFaults bound the faults of one seed (defaults 1
	// and 3, at least MinFaults): each seed draws between them.
	MinFaults, MaxFaults int
	// CheckpointInterval is the job's checkpoint interval (default 20 ms).
	CheckpointInterval time.Duration
	// Paces is how often the sources of a run under faults pause for a
	// checkpoint: after each 1/Paces of the records they emitted in the
	// fault-free run, a source emits nothing until a checkpoint completed
	// (default 4; negative: never). Checkpoints then fall throughout the
	// input whatever the machine's speed, so most faults restore from one.
	Paces int
	// RunTimeout bounds one run (default 2 min): a run that hangs fails
	// with its seed.
	RunTimeout time.Duration
	// Options are applied to every run's environment before the
	// harness's own (parallelism, chaining, buffer sizes, …).
	Options []weir.Option
}

func (c *Config) defaults() {
	if c.Seeds <= 0 {
		c.Seeds = 3
	}
	if c.FirstSeed == 0 {
		c.FirstSeed = 1
	}
	if c.Kinds == 0 {
		c.Kinds = AllKinds
	}
	if c.MinFaults <= 0 {
		c.MinFaults = 1
	}
	if c.MaxFaults <= 0 {
		c.MaxFaults = 3
	}
	c.MaxFaults = max(c.MaxFaults, c.MinFaults)
	if c.Paces == 0 {
		c.Paces = 4
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = 20 * time.Millisecond
	}
	if c.RunTimeout <= 0 {
		c.RunTimeout = 2 * time.Minute
	}
	if *flagRuns > 0 {
		c.Seeds = *flagRuns
	}
	if *flagSeed != 0 {
		c.FirstSeed, c.Seeds = *flagSeed, 1
	}
}

// R is one run of the job: the job function builds the job on R's
// environment and attaches its checkers (Collect, FileSink,
// TwoPhaseCommitSink, Output).
type R struct {
	cfg     *Config
	seed    uint64 // 0: the fault-free run
	dir     string
	env     *weir.Environment
	h       *injector
	outputs []output
	err     error // a misuse of R, reported by the run
}

// Seed is the run's seed (0 for the fault-free run).
func (r *R) Seed() uint64 { return r.seed }

// TempDir is a directory of the run, removed after it.
func (r *R) TempDir() string { return r.dir }

// Env returns the run's environment: opts, then the harness's options
// (checkpointing into the run's fault-injecting storage, a restart
// strategy, the test harness, TCP exchanges if configured). The job must
// be built on it, once: a second call returns the first environment, and
// the run fails.
func (r *R) Env(opts ...weir.Option) *weir.Environment {
	if r.env != nil {
		r.err = errors.New("weirtest: R.Env called twice")
		return r.env
	}
	storage, err := state.NewFileStorage(state.FileStorageConfig{Dir: "/checkpoints", FS: &faultFS{FS: state.NewMemFS(), h: r.h}})
	if err != nil {
		panic(err) // an in-memory file system cannot fail to create a directory
	}
	restart := weir.FixedDelayRestart(2*r.cfg.MaxFaults+4, 0)
	all := append(append([]weir.Option(nil), r.cfg.Options...), opts...)
	all = append(all,
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: r.cfg.CheckpointInterval, Mode: r.cfg.Mode,
			Unaligned: r.cfg.Unaligned, Storage: storage}),
		weir.WithRestartStrategy(restart),
		weir.WithTestHarness(r.h),
	)
	if r.cfg.TCP {
		all = append(all, weir.WithTCPExchanges(true))
	}
	r.env = weir.NewEnvironment(all...)
	return r.env
}

// SeedResult is what one run did.
type SeedResult struct {
	Seed   uint64
	Faults []Fault
	// Fired counts the faults that fired; Unfired lists the others (read
	// faults of runs that restored no state, or a harness problem).
	Fired    int
	Unfired  []Fault
	Restarts int
	// Restored counts the restarts that restored a checkpoint (the others
	// started over).
	Restored    int
	Checkpoints int
	Duration    time.Duration
	Verdict     *Verdict
	// Err is a run that failed outright: the job's error, a hang, or a
	// harness problem (*HarnessError).
	Err error
}

// Failed reports whether the seed failed.
func (s *SeedResult) Failed() bool { return s.Err != nil || (s.Verdict != nil && !s.Verdict.OK()) }

// HarnessError reports a run that proves nothing: a fault that never
// fired, or a run that never checkpointed. It is not a verdict on the job.
type HarnessError struct {
	Seed   uint64
	Reason string
}

func (e *HarnessError) Error() string {
	return fmt.Sprintf("weirtest: harness problem, not a job failure (seed %d): %s", e.Seed, e.Reason)
}

// Report is the result of Check: the seeds run, stopping at the first that
// failed.
type Report struct {
	Seeds []SeedResult
	// Baseline is the fault-free run's duration.
	Baseline time.Duration
}

// Failed returns the failed seed, if any.
func (r *Report) Failed() *SeedResult {
	for i := range r.Seeds {
		if r.Seeds[i].Failed() {
			return &r.Seeds[i]
		}
	}
	return nil
}

// Table renders the summary table.
func (r *Report) Table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "seed\tfaults\tfired\trestarts\trestored\tcheckpoints\ttime\tverdict\tplan")
	var faults, fired, restarts, restored, ckpts int
	for _, s := range r.Seeds {
		v := "ok"
		switch {
		case s.Err != nil:
			v = "error"
			var he *HarnessError
			if errors.As(s.Err, &he) {
				v = "harness"
			}
		case s.Verdict != nil:
			v = s.Verdict.Summary()
		}
		kinds := make([]string, len(s.Faults))
		for i, f := range s.Faults {
			kinds[i] = f.Kind.String()
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\t%v\t%s\t%s\n", s.Seed, len(s.Faults), s.Fired, s.Restarts, s.Restored, s.Checkpoints,
			s.Duration.Round(time.Millisecond), v, strings.Join(kinds, " "))
		faults, fired, restarts, ckpts = faults+len(s.Faults), fired+s.Fired, restarts+s.Restarts, ckpts+s.Checkpoints
		restored += s.Restored
	}
	fmt.Fprintf(w, "total %d\t%d\t%d\t%d\t%d\t%d\t\t\t\n", len(r.Seeds), faults, fired, restarts, restored, ckpts)
	w.Flush()
	return b.String()
}

// KindTotals returns, per fault kind, how many faults the seeds planned
// and how many fired, as lines "kind planned fired" in kind order.
func (r *Report) KindTotals() string {
	var planned, fired [numKinds]int
	for _, s := range r.Seeds {
		for _, f := range s.Faults {
			planned[f.Kind]++
			fired[f.Kind]++
		}
		for _, f := range s.Unfired {
			fired[f.Kind]--
		}
	}
	var b strings.Builder
	for k := range numKinds {
		if planned[k] > 0 {
			fmt.Fprintf(&b, "%-18s planned %5d fired %5d\n", k, planned[k], fired[k])
		}
	}
	return b.String()
}

// Run runs the job fault-free, then under the faults of cfg.Seeds seeds,
// stopping at the first seed whose committed output differs from the
// fault-free run's (or that fails, hangs, or proves nothing). It logs the
// summary table and fails t with the seed, its faults and the verdict.
func Run(t testing.TB, cfg Config, job func(r *R)) *Report {
	t.Helper()
	rep, err := Check(t.Context(), cfg, job)
	if rep != nil && len(rep.Seeds) > 0 {
		t.Logf("weirtest summary (fault-free run %v):\n%s", rep.Baseline.Round(time.Millisecond), rep.Table())
	}
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Check is Run without a testing.TB: it returns the report and, if a seed
// failed, an error that names it with its faults and verdict.
func Check(ctx context.Context, cfg Config, job func(r *R)) (*Report, error) {
	cfg.defaults()
	rep := &Report{}
	base, err := runOnce(ctx, &cfg, 0, nil, nil, job)
	if err != nil {
		return rep, fmt.Errorf("weirtest: fault-free run: %w", err)
	}
	rep.Baseline = base.Duration
	if base.Checkpoints == 0 {
		return rep, &HarnessError{Reason: "the fault-free run completed no checkpoint"}
	}
	want := expect(base.out)
	for i := range cfg.Seeds {
		seed := cfg.FirstSeed + uint64(i)
		plan := planFaults(seed, cfg.Kinds, cfg.MinFaults, cfg.MaxFaults, cfg.TCP, base.profile)
		run, err := runOnce(ctx, &cfg, seed, plan, &base.profile, job)
		s := SeedResult{Seed: seed, Faults: plan, Err: err}
		if run != nil {
			s.Fired, s.Restarts, s.Restored, s.Checkpoints, s.Duration = run.fired, run.Restarts, run.restored, run.Checkpoints, run.Duration
			s.Unfired = run.unfired
			if err == nil {
				s.Verdict = compare(cfg.Mode == weir.AtLeastOnce, base.names, want, run.out)
				s.Err = run.harnessErr
			}
		}
		rep.Seeds = append(rep.Seeds, s)
		if s.Failed() {
			return rep, seedError(&s)
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	return rep, nil
}

// seedError describes a failed seed, with how to reproduce it.
func seedError(s *SeedResult) error {
	what := ""
	switch {
	case s.Err != nil:
		what = s.Err.Error()
		if s.Verdict != nil && !s.Verdict.OK() {
			what += "\n" + s.Verdict.String()
		}
	default:
		what = s.Verdict.String()
	}
	return fmt.Errorf("weirtest: seed %d failed (reproduce with -weirtest.seed=%d)\nfaults:%s\n%s", s.Seed, s.Seed, describe(s.Faults), what)
}

// runResult is what one run produced.
type runResult struct {
	Duration    time.Duration
	Restarts    int
	Checkpoints int
	fired       int
	unfired     []Fault
	restored    int
	names       []string
	out         [][]Record
	profile     profile
	harnessErr  error
}

// runOnce builds the job on a fresh environment and runs it under plan.
func runOnce(ctx context.Context, cfg *Config, seed uint64, plan []Fault, base *profile, job func(r *R)) (*runResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.RunTimeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "weirtest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r := &R{cfg: cfg, seed: seed, dir: dir, h: newInjector(ctx, plan, base, cfg.Paces)}
	job(r)
	switch {
	case r.err != nil:
		return nil, r.err
	case r.env == nil:
		return nil, errors.New("weirtest: the job function did not call R.Env")
	}
	start := time.Now()
	res, err := r.env.Execute(ctx)
	out := &runResult{Duration: time.Since(start)}
	for i := range plan {
		if r.h.fired[i].Load() {
			out.fired++
		} else {
			out.unfired = append(out.unfired, plan[i])
		}
	}
	r.h.mu.Lock()
	out.restored = r.h.mu.restores
	r.h.mu.Unlock()
	if res != nil {
		out.Restarts = res.Restarts
		if res.Checkpoints != nil {
			out.Checkpoints = res.Checkpoints.Completed
		}
	}
	if err != nil {
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			err = fmt.Errorf("run did not end within %v (a hang?): %w", cfg.RunTimeout, err)
		}
		return out, fmt.Errorf("job failed: %w", err)
	}
	if res.LeakedSegments > 0 {
		return out, fmt.Errorf("job leaked %d network segments", res.LeakedSegments)
	}
	for _, o := range r.outputs {
		rs, err := o.read()
		if err != nil {
			return out, fmt.Errorf("reading output %s: %w", o.name, err)
		}
		out.names = append(out.names, o.name)
		out.out = append(out.out, rs)
	}
	out.profile = r.h.profile()
	must, _ := r.h.unfired()
	switch {
	case len(must) > 0:
		reason := "faults never fired:" + describe(must)
		r.h.mu.Lock()
		if r.h.mu.gaveUp {
			reason += fmt.Sprintf("\n(the sources were released after %d checkpoints completed with all of them exhausted: what the faults aim at did not happen)", drainCheckpoints)
		}
		r.h.mu.Unlock()
		out.harnessErr = &HarnessError{Seed: seed, Reason: reason}
	case out.Checkpoints == 0:
		out.harnessErr = &HarnessError{Seed: seed, Reason: "the run completed no checkpoint"}
	}
	return out, nil
}
