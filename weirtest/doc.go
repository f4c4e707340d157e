// Package weirtest tests a user's weir job under injected faults, in the
// spirit of net/http/httptest: a Go test hands Run a function that builds
// the job, and Run proves, seed by seed, that the job's committed output
// under faults is what a fault-free run of the same job commits.
//
// A run is one execution of the job on the environment R.Env returns.
// Run first runs the job without faults, then once per seed under that
// seed's fault plan: one to Config.MaxFaults faults drawn from the seed
// and aimed by what the fault-free run did (its operator subtasks and
// their record counts). The faults are injected through the runtime, not
// simulated:
//
//   - task failures at a chosen record of a chosen operator subtask, and
//     failures at a subtask's snapshot or at its notification that a
//     checkpoint completed (a two-phase-commit sink fails before it
//     commits), through weir.WithTestHarness's probes;
//   - slow consumers: a subtask that sleeps before each of a run of
//     records (back pressure);
//   - a fault-injecting checkpoint storage (state.FileStorage over an
//     in-memory file system): failed, torn, unsynced or delayed writes of
//     state files, and failed, corrupt or delayed reads on restore;
//   - connection resets on the TCP exchanges (Config.TCP).
//
// Counts run over the whole run, restarts included, so the same seed
// fires the same faults at the same counts, and every fault aimed at a
// record fires. Exhausted sources are held (they emit nothing and do not
// end, and checkpoints go on) until every fault fired and the current
// attempt completed a checkpoint.
//
// The verdict compares the committed outputs: values lost, duplicated or
// unexpected (not in the fault-free output: a wrong result), and keys
// whose values came in another order, each with examples. Under
// weir.AtLeastOnce only losses fail. Checkers: Collect, FileSink and
// TwoPhaseCommitSink attach weir's sinks and read what they committed (the
// two-phase-commit sink through committers that record what they commit);
// R.Output reads the user's own destination.
//
// A run that proves nothing is a *HarnessError, never a pass: a fault that
// never fired (read faults excepted: they fire only if the run restores
// state), or a run that completed no checkpoint. A run that hangs fails at
// Config.RunTimeout. Nothing outlives a run: its goroutines end with the
// job and its temporary directory is removed, so thousands of seeds run in
// one test binary.
//
// Caller's duties, in order:
//
//  1. In the job function, build the environment with R.Env (options for
//     parallelism and the like go there or in Config.Options), once.
//  2. Attach a checker to every output the test should judge.
//  3. Make the job deterministic where it is judged: the same input gives
//     the same committed values (and, for keys whose order is checked,
//     the same order per key).
//
// The flags -weirtest.seed (run one seed, the one a failure printed) and
// -weirtest.runs (seeds per Run call) override Config.
package weirtest
