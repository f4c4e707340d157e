package metrics

import (
	"runtime"
	"time"
)

// Runtime is a Go process's runtime figures, as the dashboard's workers
// view shows them: for the job's own process, and for each worker of a
// job across processes (which reports them with its tasks' metrics).
type Runtime struct {
	// HeapBytes is the bytes of live and not yet swept heap objects
	// (runtime.MemStats.HeapAlloc); SysBytes all the memory the runtime
	// obtained from the OS.
	HeapBytes uint64 `json:"heapBytes"`
	SysBytes  uint64 `json:"sysBytes"`
	// Goroutines counts the goroutines; CPUs is runtime.NumCPU.
	Goroutines int `json:"goroutines"`
	CPUs       int `json:"cpus"`
	// NumGC counts the completed GC cycles; GCPauseTotalNanos adds up
	// their stop-the-world pauses; MaxRecentGCPauseNanos is the longest
	// pause since the previous reading (of those the runtime still keeps:
	// its last 256).
	NumGC                 uint32 `json:"numGC"`
	GCPauseTotalNanos     uint64 `json:"gcPauseTotalNanos"`
	MaxRecentGCPauseNanos uint64 `json:"maxRecentGCPauseNanos"`
}

// RuntimeReader reads the process's Runtime; it remembers the GC cycles
// it saw, for MaxRecentGCPauseNanos. Not safe for concurrent use.
type RuntimeReader struct {
	lastGC uint32
}

// Read returns the figures now. It stops the world for a moment
// (runtime.ReadMemStats): call it once per metrics interval, not per
// record.
func (r *RuntimeReader) Read() Runtime {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out := Runtime{HeapBytes: ms.HeapAlloc, SysBytes: ms.Sys, Goroutines: runtime.NumGoroutine(), CPUs: runtime.NumCPU(),
		NumGC: ms.NumGC, GCPauseTotalNanos: ms.PauseTotalNs}
	// PauseNs is a ring of the last 256 pauses; cycle n's is at
	// (n+255)%256.
	for n := max(r.lastGC+1, ms.NumGC-min(ms.NumGC, 255)); n <= ms.NumGC && n > 0; n++ {
		out.MaxRecentGCPauseNanos = max(out.MaxRecentGCPauseNanos, ms.PauseNs[(n+255)%256])
	}
	r.lastGC = ms.NumGC
	return out
}

// Worker is one process running the job's tasks, for the dashboard's
// workers view (the REST API's /taskmanagers).
type Worker struct {
	// ID is the worker's ID ("local": the job's own process).
	ID string
	// DataAddr is its data-plane address; Peer where its control stream
	// comes from ("" for the local process).
	DataAddr, Peer string
	// Tasks counts the current attempt's tasks it runs.
	Tasks int
	// Runtime is its latest report (Reported: when it arrived; zero: none
	// yet).
	Runtime  Runtime
	Reported time.Time
}
