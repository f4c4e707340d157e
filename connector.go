package weir

import (
	"context"

	"go.uber.org/zap"
)

// Environment returns the environment s is built in: connectors and
// libraries built on this package read the job's settings from it.
func (s *Stream[T]) Environment() *Environment { return s.env }

// ReportError records an error that Execute returns: connectors and
// libraries built on this package report bad configuration through it,
// as the package's own functions do, so a job is checked whole before it
// runs.
func (e *Environment) ReportError(err error) {
	if err != nil {
		e.fail(err)
	}
}

// Checkpointing returns the job's checkpoint settings, and false when
// checkpointing is off.
func (e *Environment) Checkpointing() (CheckpointConfig, bool) {
	if e.cfg.ckpt == nil {
		return CheckpointConfig{}, false
	}
	return *e.cfg.ckpt, true
}

// Logger returns the job's logger (see WithLogger).
func (e *Environment) Logger() *zap.Logger { return e.cfg.logger }

// CheckBeforeRun registers fn for Start (and so Execute) to call, with
// Start's context, once the job's configuration is valid and before any
// task runs: connectors check there what only the system they connect to
// can tell (that a server can be reached, that a table exists with the
// columns written), so that a job that cannot work fails before it reads
// a record. Start returns the first error.
func (e *Environment) CheckBeforeRun(fn func(ctx context.Context) error) {
	if fn != nil {
		e.runChecks = append(e.runChecks, fn)
	}
}
