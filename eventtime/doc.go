// Package eventtime holds weir's event-time machinery: watermarks, their
// status, the valve that combines them across a task's inputs, and the
// generators that make them at the sources.
//
// # Nouns
//
// A watermark is a promise about event time: a watermark T on a stream
// says that no record with a timestamp at or below T will follow on it.
// Watermarks and event timestamps are int64 milliseconds. MinWatermark
// (math.MinInt64) means "no watermark yet" (and, as NoTimestamp, "this
// record has no timestamp"); MaxWatermark (math.MaxInt64) is the end of
// event time, sent when an input is exhausted. A stream's watermarks only
// rise.
//
// A watermark status (Status) says whether a stream currently carries
// records and watermarks (Active) or has gone quiet (Idle), such as a
// source reading an empty partition. Consumers do not wait for an idle
// stream's watermark, so a quiet input does not stall event time.
//
// A valve (Valve) sits on a task's inputs. It takes the watermarks and
// statuses arriving on each input channel and decides which combined
// watermark and status the task forwards: the minimum over the channels
// that count, only when it rises, and Idle only when every channel is
// idle. It is the port of Flink's StatusWatermarkValve; the exact rules
// are in docs/watermark-scenarios.md, and testdata/valve/*.txt holds them
// as transcripts run against the real valve.
//
// A generator (Generator) makes a stream's watermarks at its source, from
// the timestamps of its records, and writes them, with status changes, to
// an Output (Flink's WatermarkGenerator and WatermarkOutput). Built in:
// BoundedOutOfOrderness (the highest timestamp seen minus a bound, minus
// 1), NewMonotonousTimestamps (the same with bound 0), and Idleness, which
// wraps another generator and marks the stream idle when records stop
// coming. DedupOutput sits in front of the task's output so that only
// rising watermarks and actual status changes reach the stream.
//
// A multiplexer (Multiplexer) combines the watermarks of a source
// subtask's splits (Kafka partitions, shards), each made by its own
// generator, into the subtask's watermark: the minimum over the active
// splits, Idle when every split is idle or there is none (Flink's
// WatermarkOutputMultiplexer). It is pure like the valve.
//
// # Driving a valve
//
// A Valve is a pure state machine: no goroutines, clocks or I/O inside,
// no allocation per call. The task owns it and calls it from its one
// goroutine:
//
//  1. Create it with NewValve over the number of input channels, when the
//     task starts (and again after a restore: watermarks are not
//     checkpointed, every channel starts at MinWatermark).
//  2. For a watermark event taken from channel ch, call
//     InputWatermark(ch, ts). If it returns a watermark, first fire the
//     event-time work (timers, windows) up to it, then forward it
//     downstream.
//  3. For a watermark status event from channel ch, call
//     InputStatus(ch, status). If the returned Emission has a watermark,
//     handle it as in step 2; then, if the status changed, forward the new
//     status downstream. Always in that order: watermark, then status.
//  4. Records need nothing from the valve. For metrics, Watermark gives
//     the current combined input watermark, Status the output status, and
//     Channel a channel's own watermark, status and whether it counts.
//
// A channel index outside 0..N-1 is a bug in the caller: the valve panics
// with the values.
//
// # Driving a generator
//
// Generators are pure too: time reaches Idleness only through the clock
// function it was given. The source task, from its one goroutine:
//
//  1. Builds the generator when the source subtask starts, and wraps the
//     task's own Output (which writes watermark and status events to
//     every output channel) in a DedupOutput.
//  2. After emitting each record, calls OnEvent with the record's
//     timestamp, so that a watermark a punctuated generator emits from
//     OnEvent follows the record that caused it.
//  3. At every watermark interval, calls OnPeriodicEmit from the mailbox,
//     between records. A source of several splits (one generator each,
//     combined by a Multiplexer) calls those of the splits quiet longest
//     first (Idleness.Quiet), so that splits turn idle in the order their
//     timeouts ran out even when one late call finds several run out.
//  4. At the end of its input, emits MaxWatermark to the Output itself.
package eventtime
