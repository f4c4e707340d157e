// Package join holds the pure cores of weir's operators with two inputs:
// the keyed event-time interval join (op=interval in the scenarios) and
// the keyed broadcast process operator with broadcast state and
// event-time timers (op=broadcast). The third two-input core, the
// combination of the inputs' watermarks (op=watermarks), is
// eventtime.CombinedValve: every task uses it.
//
// A two-input operator has a first input (Flink's input 1: the left side
// of a join, the keyed side of a broadcast process) and a second input
// (input 2: the right side, the broadcast side). Its cores are pure:
// elements with explicit key and timestamp, watermarks and snapshots come
// in as method calls; they read no clock and start no goroutine.
//
// docs/join-scenarios.md fixes the text format of their scenario files;
// every testdata/join/*.txt file runs through the real cores
// (TestJoinScenarios), whichever op it exercises.
package join
