// Package window is the core of weir's keyed window operator, a port of
// Flink's WindowOperator with its built-in window assigners and triggers.
//
// # Windows
//
// A window is a span of event or processing time, [Start, End), that
// belongs to one key: each key has its own windows, contents, trigger
// state and timers. Its MaxTimestamp is End - 1; the global window of a
// key never ends (MaxTimestamp math.MaxInt64). An Assigner puts each
// element in windows (tumbling, sliding, session, global); a Trigger
// decides when a window fires, that is emits its Function's result over
// its contents (event time, processing time, never, count, continuous
// event time, purging); the operator removes a window at its cleanup
// time, MaxTimestamp + allowed lateness for event-time windows. Elements
// that no live window takes and that are behind the watermark by more
// than the lateness are late: they go to Output.Late or are dropped and
// counted.
//
// Operator is pure: elements, watermarks and processing time come in as
// method calls, results leave through the caller's Output, and it starts
// no goroutine. Every bit of its state lives in a state.KeyedBackend, so
// checkpoints, savepoints and rescaling (key groups moving between
// subtasks) need nothing from it.
//
// # The caller's duties, in order
//
//  1. Create (or restore) the keyed backend; then New. An Operator created
//     on a restored backend continues from it: windows, sessions, trigger
//     state and timers are all rebuilt from the backend. The watermark is
//     not part of it and starts at math.MinInt64.
//  2. For each element: ProcessElement with its serialized key, the key's
//     key group and its event timestamp (math.MinInt64 when it has none;
//     event-time windows need one).
//  3. When the task's combined input watermark advances: AdvanceWatermark,
//     then forward the watermark downstream (event-time timers fire before
//     the watermark leaves).
//  4. From the task's mailbox, never concurrently with 2 or 3: when the
//     processing clock reaches NextProcessingTime, AdvanceProcessingTime.
//     Config.Clock gives the operator the same clock (processing-time
//     windows assign elements by it).
//  5. At a checkpoint, snapshot the keyed backend.
//
// # State layout
//
// The operator named N (Config.Name, default "window") registers, in the
// backend:
//
//	_window/N/contents   value (Reduce, Aggregate) or list (Process) state,
//	                     under window key: the window's contents
//	_window/N/count      value, under window key: a count trigger's count
//	_window/N/fire-time  value, under window key: a continuous trigger's
//	                     next firing
//	_window/N/sessions   value, under the record key: the key's sessions,
//	                     ascending, 16 bytes each
//	_timers/N/event, _timers/N/processing
//	                     the timers (eventtime.TimerService named N): under
//	                     the record key, namespace = encoded window
//
// The window key of a record key k and window w is k followed by w's
// encoding (Start and End as 8 big-endian bytes each, sign bit flipped, so
// that encodings order like (Start, End); nothing for the global window),
// in k's key group, so that a key's windows move with it. Session merges
// move contents and trigger state to the merged window's key. With an
// integer key codec (UseKeyCodec) on a backend that holds keys by value
// (state.ValueKeyBackend: the heap backend) the backend holds these keys
// as state.ValueKeys that encode to the same bytes, so snapshots are the
// same either way.
//
// # Differences from Flink
//
// Timers with equal timestamps fire ordered by key (bytewise), then window
// start, then end, where Flink's heap order is arbitrary. Merged session
// contents are concatenated by ascending session start (Flink keeps one
// merged session's state and appends the others in hash order). A merge
// never fails: Flink rejects a merged session whose cleanup time, computed
// with int64 wraparound, is behind the watermark; here cleanup times are
// clamped at math.MaxInt64 everywhere, and a late merged session is
// dropped like any late window. The late-element test clamps
// ts + lateness too. There are no evictors, custom triggers or
// assigners, dynamic session gaps or window stagger.
package window
