// Package queries holds the Nexmark queries written with weir's public
// API, one function per query from the stream of events
// (nexmark.Source) to the stream of its result rows, following the
// definitions of Flink's Nexmark repository (as SQL there).
//
// A row type per query carries the SQL's output columns, with the JSON
// names of those columns; windowed queries also carry their window's
// StartTime and EndTime (epoch ms). Queries whose SQL result updates (q4,
// q9) emit a row whenever a result changes: the last row of a key is its
// result.
package queries
