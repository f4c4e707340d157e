// Package failpaths holds end-to-end tests of weir's failure paths: jobs
// run through the public API (in one process and as a cluster of a
// coordinator and workers in the test process) whose user functions,
// inputs or connections fail, checked for the outcome the job reports.
// It has no code of its own; its tests run beside the root package's.
package failpaths
