package cluster

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

type workerSample struct {
	name string
	m    WorkerMessage
	json string // the pinned wire form
}

type coordinatorSample struct {
	name string
	m    CoordinatorMessage
	json string
}

var sampleTask = state.TaskKey{Vertex: "window", Subtask: 2}

// workerSamples is one message of every kind a worker sends, with every
// field set (TestSamplesSetEveryField), and its wire form.
func workerSamples() []workerSample {
	return []workerSample{
		{"register", WorkerMessage{Register: &Register{WorkerID: "w1", DataAddr: "10.0.0.1:7001", Fingerprint: "graph-1", Slots: 4,
			Features: []string{FeatureProfile}}},
			`{"Register":{"WorkerID":"w1","DataAddr":"10.0.0.1:7001","Fingerprint":"graph-1","Slots":4,"Features":["profile"]}}`},
		{"heartbeat", WorkerMessage{Heartbeat: &Heartbeat{}},
			`{"Heartbeat":{}}`},
		{"task status", WorkerMessage{TaskStatus: &TaskStatus{Attempt: 3, Task: sampleTask, State: Failed, Error: "boom", NonRecoverable: true, Codes: []string{"state.incompatible"},
			Metrics: &TaskMetrics{Name: "window (3/4)", RecordsIn: 1, RecordsOut: 2, BytesIn: 3, BytesOut: 4,
				BusyNanos: 5_000_000_000, IdleNanos: 6, BackPressuredNanos: 7}}},
			`{"TaskStatus":{"Attempt":3,"Task":{"Vertex":"window","Subtask":2},"State":3,"Error":"boom","Metrics":{"Name":"window (3/4)","RecordsIn":1,"RecordsOut":2,"BytesIn":3,"BytesOut":4,"BusyNanos":5000000000,"IdleNanos":6,"BackPressuredNanos":7},"NonRecoverable":true,"Codes":["state.incompatible"]}}`},
		{"ack", WorkerMessage{Ack: &Ack{Attempt: 3, Task: sampleTask, ID: 7,
			Snapshot: state.EncodeTaskSnapshot(state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
				"op": {Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: "chk-7/op", Size: 8, Checksum: 9}}},
			}}),
			Metrics: CheckpointMetrics{AlignmentNanos: 1, StartDelayNanos: 2, SyncNanos: 3, AsyncNanos: 4,
				StateSizeBytes: 5, BytesProcessedDuringAlignment: 6}}},
			`{"Ack":{"Attempt":3,"Task":{"Vertex":"window","Subtask":2},"ID":7,"Snapshot":"V0VJUlNOQVAHAAABAm9wAghjaGstNy9vcAgACQAAAAAAAAAAqo2WPA==","Metrics":{"AlignmentNanos":1,"StartDelayNanos":2,"SyncNanos":3,"AsyncNanos":4,"StateSizeBytes":5,"BytesProcessedDuringAlignment":6}}}`},
		{"decline", WorkerMessage{Decline: &Decline{Attempt: 3, Task: sampleTask, ID: 7, Kind: barrier.DeclineTaskNotReady, Reason: "not yet"}},
			`{"Decline":{"Attempt":3,"Task":{"Vertex":"window","Subtask":2},"ID":7,"Kind":2,"Reason":"not yet"}}`},
		{"committed", WorkerMessage{Committed: &Committed{Attempt: 3, Error: "abort failed"}},
			`{"Committed":{"Attempt":3,"Error":"abort failed"}}`},
		{"metrics", WorkerMessage{Metrics: &MetricsReport{Attempt: 3, Tasks: []LiveTaskMetrics{{Task: sampleTask, Name: "window (3/4)",
			State: Running, ElapsedNanos: 1, RecordsIn: 2, RecordsOut: 3, BytesIn: 4, BytesOut: 5, BusyNanos: 6, IdleNanos: 7,
			BackPressuredNanos: 8, InputWatermark: 9, OutputWatermark: 10, Input: BufferUsage{Queued: 11, InUse: 12, Capacity: 13},
			Output: BufferUsage{Queued: 14, InUse: 15, Capacity: 16}, Operators: []OperatorMetrics{{Name: "window", LateRecordsDropped: 17}}}},
			Runtime: &RuntimeMetrics{HeapBytes: 18, SysBytes: 19, Goroutines: 20, CPUs: 21, NumGC: 22, GCPauseTotalNanos: 23,
				MaxRecentGCPauseNanos: 24}}},
			`{"Metrics":{"Attempt":3,"Tasks":[{"Task":{"Vertex":"window","Subtask":2},"Name":"window (3/4)","State":1,"ElapsedNanos":1,"RecordsIn":2,"RecordsOut":3,"BytesIn":4,"BytesOut":5,"BusyNanos":6,"IdleNanos":7,"BackPressuredNanos":8,"InputWatermark":9,"OutputWatermark":10,"Input":{"Queued":11,"InUse":12,"Capacity":13},"Output":{"Queued":14,"InUse":15,"Capacity":16},"Operators":[{"Name":"window","LateRecordsDropped":17}]}],"Runtime":{"HeapBytes":18,"SysBytes":19,"Goroutines":20,"CPUs":21,"NumGC":22,"GCPauseTotalNanos":23,"MaxRecentGCPauseNanos":24}}}`},
		{"profile", WorkerMessage{Profile: &Profile{ID: 5, Data: []byte{0x1f, 0x8b}, Error: "cpu profiling already in use", Busy: true}},
			`{"Profile":{"ID":5,"Data":"H4s=","Error":"cpu profiling already in use","Busy":true}}`},
	}
}

// coordinatorSamples is one message of every kind the coordinator sends,
// with every field set, and its wire form.
func coordinatorSamples() []coordinatorSample {
	src := state.TaskKey{Vertex: "src", Subtask: 1}
	return []coordinatorSample{
		{"registered", CoordinatorMessage{Registered: &Registered{WorkerID: "w1"}},
			`{"Registered":{"WorkerID":"w1"}}`},
		{"deploy", CoordinatorMessage{Deploy: &Deploy{Attempt: 3, Epoch: 9, JobID: "job",
			Tasks:     []Assignment{{Task: src, WorkerID: "w1"}},
			DataAddrs: map[string]string{"w1": "10.0.0.1:7001"},
			Restore: state.EncodeMetadata(state.Metadata{ID: 7, Timestamp: 1, Kind: barrier.Checkpoint,
				Tasks: map[state.TaskKey]state.TaskSnapshot{src: {}}}),
			RestoreFrom: &StorageLocation{Root: "/ckpt", JobID: "j0"}, Checkpoints: StorageLocation{Root: "s3://bucket/ckpt", JobID: "j1"}, Mode: barrier.AtLeastOnce,
			Alignment: barrier.AlignedWithTimeout, AlignmentTimeoutMillis: 10}},
			`{"Deploy":{"Attempt":3,"Epoch":9,"JobID":"job","Tasks":[{"Task":{"Vertex":"src","Subtask":1},"WorkerID":"w1"}],"DataAddrs":{"w1":"10.0.0.1:7001"},"Restore":"V0VJUk1FVEEHAAcCAAABA3NyYwEAAJ6/BKs=","RestoreFrom":{"Root":"/ckpt","JobID":"j0"},"Checkpoints":{"Root":"s3://bucket/ckpt","JobID":"j1"},"Mode":1,"Alignment":2,"AlignmentTimeoutMillis":10}}`},
		{"cancel attempt", CoordinatorMessage{CancelAttempt: &CancelAttempt{Attempt: 3, Epoch: 9}},
			`{"CancelAttempt":{"Attempt":3,"Epoch":9}}`},
		{"trigger checkpoint", CoordinatorMessage{TriggerCheckpoint: &TriggerCheckpoint{Attempt: 3, Epoch: 9, Task: src,
			Barrier: barrier.Barrier{ID: 7, Timestamp: 1_700_000_000_000,
				Options: barrier.Options{Kind: barrier.Savepoint, Alignment: barrier.AlignedWithTimeout, AlignmentTimeout: 2 * time.Second}}}},
			`{"TriggerCheckpoint":{"Attempt":3,"Epoch":9,"Task":{"Vertex":"src","Subtask":1},"Barrier":{"ID":7,"Timestamp":1700000000000,"Options":{"Kind":1,"Alignment":2,"AlignmentTimeout":2000000000}}}}`},
		{"notify checkpoint", CoordinatorMessage{NotifyCheckpoint: &NotifyCheckpoint{Attempt: 3, Epoch: 9, Task: src, ID: 7, Aborted: true}},
			`{"NotifyCheckpoint":{"Attempt":3,"Epoch":9,"Task":{"Vertex":"src","Subtask":1},"ID":7,"Aborted":true}}`},
		{"commit", CoordinatorMessage{Commit: &Commit{Attempt: 3, Epoch: 9, Commit: true, Completed: 7}},
			`{"Commit":{"Attempt":3,"Epoch":9,"Commit":true,"Completed":7}}`},
		{"shutdown", CoordinatorMessage{Shutdown: &Shutdown{Reason: "job finished"}},
			`{"Shutdown":{"Reason":"job finished"}}`},
		{"heartbeat", CoordinatorMessage{Heartbeat: &Heartbeat{}},
			`{"Heartbeat":{}}`},
		{"start profile", CoordinatorMessage{StartProfile: &StartProfile{ID: 5, Millis: 10_000}},
			`{"StartProfile":{"ID":5,"Millis":10000}}`},
		{"cancel profile", CoordinatorMessage{CancelProfile: &CancelProfile{ID: 5}},
			`{"CancelProfile":{"ID":5}}`},
	}
}

// TestWireFormatPinned: the JSON of every message is pinned, so that a
// change to the wire format (a renamed field here, or in a type of another
// package a message still carries: state.TaskKey, barrier.Barrier) fails
// here, not between two processes.
func TestWireFormatPinned(t *testing.T) {
	for _, s := range workerSamples() {
		b, err := jsonCodec{}.Marshal(&s.m)
		require.NoError(t, err)
		require.Equal(t, s.json, string(b), s.name)
	}
	for _, s := range coordinatorSamples() {
		b, err := jsonCodec{}.Marshal(&s.m)
		require.NoError(t, err)
		require.Equal(t, s.json, string(b), s.name)
	}
}

// TestSamplesSetEveryField keeps the samples complete: a field added to a
// message without a value in its sample fails here (and the value then
// shows up in the pinned JSON).
func TestSamplesSetEveryField(t *testing.T) {
	kinds := map[string]bool{}
	for _, s := range workerSamples() {
		k, err := s.m.kind()
		require.NoError(t, err)
		kinds["worker "+k] = true
		requireAllSet(t, s.name, reflect.ValueOf(s.m))
	}
	for _, s := range coordinatorSamples() {
		k, err := s.m.kind()
		require.NoError(t, err)
		kinds["coordinator "+k] = true
		requireAllSet(t, s.name, reflect.ValueOf(s.m))
	}
	require.Len(t, kinds, reflect.TypeFor[WorkerMessage]().NumField()+reflect.TypeFor[CoordinatorMessage]().NumField(),
		"a sample of every kind")
}

// requireAllSet fails unless every field reachable from v (through
// pointers, structs, slices and maps) is non-zero, except for the unset
// kinds of a message and empty structs.
func requireAllSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		require.False(t, v.IsNil(), "%s is nil", path)
		requireAllSet(t, path, v.Elem())
	case reflect.Struct:
		oneOf := v.Type() == reflect.TypeFor[WorkerMessage]() || v.Type() == reflect.TypeFor[CoordinatorMessage]()
		for i := range v.NumField() {
			f := v.Field(i)
			if oneOf && f.IsNil() {
				continue
			}
			requireAllSet(t, path+"."+v.Type().Field(i).Name, f)
		}
	case reflect.Slice, reflect.Map:
		require.NotZero(t, v.Len(), "%s is empty", path)
		if v.Kind() == reflect.Map {
			for _, k := range v.MapKeys() {
				requireAllSet(t, path+"[key]", k)
				requireAllSet(t, path+"[value]", v.MapIndex(k))
			}
		} else if v.Type().Elem().Kind() != reflect.Uint8 {
			for i := range v.Len() {
				requireAllSet(t, path+"[i]", v.Index(i))
			}
		}
	default:
		require.False(t, v.IsZero(), "%s is zero", path)
	}
}

// TestMetricsConversions: the wire forms carry every field of the types
// they convert, exactly (a field added to task.Metrics or
// coordinator.TaskCheckpointMetrics and not to the conversion fails here).
func TestMetricsConversions(t *testing.T) {
	var tm task.Metrics
	fillDistinct(t, reflect.ValueOf(&tm).Elem())
	require.Equal(t, tm, TaskMetricsFrom(tm).ToTask())
	require.Equal(t, TaskMetrics{Name: "1", RecordsIn: 2, RecordsOut: 3, BytesIn: 4, BytesOut: 5,
		BusyNanos: 6, IdleNanos: 7, BackPressuredNanos: 8}, TaskMetricsFrom(tm))

	var cm coordinator.TaskCheckpointMetrics
	fillDistinct(t, reflect.ValueOf(&cm).Elem())
	require.Equal(t, cm, CheckpointMetricsFrom(cm).ToCoordinator())
	require.Equal(t, CheckpointMetrics{AlignmentNanos: 1, StartDelayNanos: 2, SyncNanos: 3, AsyncNanos: 4,
		StateSizeBytes: 5, BytesProcessedDuringAlignment: 6}, CheckpointMetricsFrom(cm))
}

// fillDistinct sets the fields of the struct v to 1, 2, 3, … in order.
func fillDistinct(t *testing.T, v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(string(rune('0' + i + 1)))
		case reflect.Int64:
			f.SetInt(int64(i + 1))
		default:
			t.Fatalf("fillDistinct: field %s of kind %v", v.Type().Field(i).Name, f.Kind())
		}
	}
}
