// Package weir is an embeddable stream-processing runtime with Apache
// Flink's fault-tolerance design. This package is its user API: a job is
// built on an Environment as a graph of typed streams, then run by
// Execute (or Start), in this process or across several.
//
// An Environment holds a job under construction and its options
// (WithParallelism, WithCheckpointing, WithLogger, …). A Stream[T] is the
// output of a source or a transformation; the package's generic functions
// build the next stream from it. Run the whole job with Execute, which
// blocks until it ends and returns a Result, or Start, which returns a
// running Job (savepoints, metrics, Cancel, Wait). Example is a complete
// word count, examples/quickstart the README's quick start; the README's
// other snippets are taken from the Examples of this package and of the
// packages they use.
//
// # Sources
//
// FromSlice, FromGenerator (rate-limited with Rate, unbounded with a
// negative count), FromChannel, FromFile, and your own readers: FromReader
// (a SourceReader), FromPollingReader (a PollingReader, which may have
// nothing to read without blocking the task) and FromSplitReader (splits
// with a watermark each, as a Kafka partition). Readers implement
// PositionedReader to rewind to a checkpoint and RescalableReader to be
// restored at another parallelism.
//
// # Transformations
//
// Map, MapErr, Filter and FlatMap work value by value; Stream.Rebalance
// and Stream.Broadcast redistribute a stream; Stream.Name, Stream.UID and
// Stream.Parallelism configure the operator that makes it. Union merges
// streams of one type; Connect and ConnectKeyed join two streams of
// different types (CoMap, CoFlatMap, CoProcess, KeyedCoProcess); a
// process function's side outputs (OutputTag, Output) become streams of
// their own with SideOutput. Values that
// cross from one task to another, or are checkpointed, need a codec: the
// built-in types have one, a struct gets one from codec.Struct2 and kin,
// set with Stream.WithCodec (ExampleStream_WithCodec). A missing one is an
// error from Execute, before any record.
//
// # Keyed state
//
// KeyBy partitions a stream by key (KeyedStream); Reduce keeps a running
// value per key and emits every update; Process runs a
// KeyedProcessFunction with its own keyed state (ValueState, ListState,
// MapState) and timers (TimerService, TimerFunction). Keyed state lives in
// the heap by default, or on disk in pebble (WithStateBackend,
// PebbleBackend, ExamplePebbleBackend).
//
// # Event time and windows
//
// AssignTimestamps gives a stream event time and watermarks
// (BoundedOutOfOrderness, MonotonousTimestamps, CustomWatermarks, with
// WatermarkStrategy.WithIdleness). Window cuts a keyed stream into windows
// (TumblingWindows, SlidingWindows, SessionWindows, GlobalWindows) with
// optional triggers and allowed lateness; WindowReduce, WindowAggregate
// and WindowProcess compute their results (ExampleWindow,
// ExampleSessionWindows).
//
// # Sinks
//
// SinkFunc, Print, Collect (in memory, for tests and small results),
// Discard, FileSink (exactly-once part files) and TwoPhaseCommitSink
// (exactly-once into a transactional system, with a TwoPhaseCommitter).
//
// # Checkpointing and savepoints
//
// WithCheckpointing takes periodic checkpoints (CheckpointConfig: aligned
// or unaligned, exactly-once or at-least-once, in memory or in a
// directory); a failed job restarts from the latest completed one as its
// RestartStrategy allows (WithRestartStrategy: FixedDelayRestart,
// FailureRateRestart, ExponentialDelayRestart, NoRestart;
// ExampleWithRestartStrategy). Job.TriggerSavepoint and
// Job.StopWithSavepoint take savepoints; WithRestoreFrom starts a job
// from a savepoint or a retained checkpoint, also at another parallelism
// (ExampleJob_StopWithSavepoint).
//
// # Cluster mode
//
// With WithCluster, Execute is the coordinator of a job whose tasks run
// on worker processes of the same program, each calling
// Environment.RunWorker (ClusterConfig, WorkerConfig,
// ExampleEnvironment_RunWorker).
//
// # Watching a job
//
// Job.Metrics returns a snapshot of the job's metrics with Flink's names
// (JobMetrics); WithDashboard serves a web dashboard, WithPrometheus a
// /metrics endpoint, Job.PrometheusCollector a collector for your own
// registry (ExampleJob_PrometheusCollector).
//
// # Testing with weirtest
//
// Package weirtest runs a job from a Go test under seeded faults (task
// failures, failing and corrupt checkpoint files, connection resets) and
// compares what it committed with a fault-free run; it reaches the runtime
// through WithTestHarness.
package weir
