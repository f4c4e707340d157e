// Package nexmark generates the Nexmark benchmark's workload: one stream
// of events of an online auction, each a Person (a new user), an Auction
// (an item put up for sale by a person) or a Bid (a person's offer on an
// auction), in the proportion 1:3:46.
//
// The central noun is the event number: the generator's n-th event is a
// pure function of the seed and n (Generator.Event), its kind, its ids
// and its event time all derive from n, so any subset of event numbers
// can be generated anywhere, in any order, by any number of source
// subtasks, and the whole stream is the same whatever the parallelism.
// The rules are the public Nexmark generator's: person and auction ids
// count up with the events of their kind (from 1000), bids and auctions
// refer to recent people and auctions, with a look-ahead of at most 10
// ids, and to a few hot auctions, sellers and bidders; event time
// advances with the event number at the configured rate, with an
// optional bounded disorder (Config.OutOfOrderGroupSize).
//
// Source makes a weir source of it: each subtask generates its share of
// the event numbers (in increasing order), keeps its position in
// checkpoints, can be restored at another parallelism, may be rate
// limited, and carries event-time timestamps with watermarks of bounded
// out-of-orderness (4 s, as Flink's Nexmark DDL).
package nexmark
