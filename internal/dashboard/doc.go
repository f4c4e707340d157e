// Package dashboard serves a running job's web dashboard: a read-only
// page (embedded, loading nothing from elsewhere) that draws the job
// graph coloured by busy and back-pressured time, the subtasks of a
// selected operator, the checkpoint history and the latest failure; the
// JSON API the page polls; and the job's metrics in Prometheus' text
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
