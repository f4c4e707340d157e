// Package dashboard serves a running job's web dashboard: a page
// (embedded, loading nothing from elsewhere) that draws the job graph
// coloured by busy and back-pressured time, the subtasks of a selected
// operator, charts of the last 10 minutes (History, a ring buffer the job
// feeds), watermarks, the checkpoint history with one checkpoint's
// subtasks, the exception history with stacks and a flame graph of a CPU
// profile, and acts on the job (savepoint, stop, checkpoint, cancel)
// through the REST API (Control); the JSON API the page polls; and the job's metrics in Prometheus' text
// format. Every response is built from the job's latest metrics snapshot
// (package metrics): a slow or hung client never reaches, let alone
// slows, the job.
//
// The caller's duties, in order:
//
//  1. Listen, which binds the address (localhost unless a host is
//     given).
//  2. Run in a goroutine the job owns, with a context that ends with the
//     job; Run shuts the server down and returns once none of its
//     goroutines is left.
package dashboard
