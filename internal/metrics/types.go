package metrics

import pub "github.com/weirstream/weir/metrics"

// The snapshot types are public (package weir/metrics): the root package
// hands them to users. This package fills them.
type (
	Job         = pub.Job
	Exception   = pub.Exception
	Vertex      = pub.Vertex
	Input       = pub.Input
	Task        = pub.Task
	Operator    = pub.Operator
	Checkpoints = pub.Checkpoints
	Summary     = pub.Summary
	Checkpoint  = pub.Checkpoint
	Histogram   = pub.Histogram
)
