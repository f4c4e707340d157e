package state_test

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// TestMetadataEncodingPinned pins the bytes of the metadata format, which
// EncodeTaskSnapshot shares: a change here is a format change and needs a
// new version.
func TestMetadataEncodingPinned(t *testing.T) {
	m := state.Metadata{ID: 42, Timestamp: -5, Kind: barrier.Savepoint, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "a", Subtask: 1}: {Operators: map[string]state.OperatorSubtaskState{
			"op": {Keyed: &state.KeyedStateHandle{StreamHandle: state.StreamHandle{Path: "chk-42/x", Size: 99, Checksum: 0xdeadbeef},
				KeyGroups: keygroup.Range{Start: 3, End: 5}, Offsets: []int64{10, 20, 30}}},
			"op2": {Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: "chk-42/y", Size: 7},
				States: map[string]state.OperatorStateMeta{"s": {Distribution: state.UnionDistribute, Offsets: []int64{4}}, "e": {}}}},
			"none": {},
		}},
		{Vertex: "b", Subtask: 0}: {Operators: map[string]state.OperatorSubtaskState{}},
	}}
	require.Equal(t, pinnedMetadataV7, hex.EncodeToString(state.EncodeMetadata(m)))
	for v, enc := range map[uint16]string{6: pinnedMetadataV6, 5: pinnedMetadataV5} {
		b, err := hex.DecodeString(enc)
		require.NoError(t, err)
		got, err := state.DecodeMetadata(b)
		require.NoError(t, err)
		require.Equal(t, atVersion(v, m.Clone()), got, "version %d is still read", v)
	}
	m.JobID = "job-1"
	got, err := state.DecodeMetadata(state.EncodeMetadata(m))
	require.NoError(t, err)
	require.Equal(t, m.Clone(), got)
	m.JobID = ""
	// Version 2 and 1 files (weir before channel state and finished tasks)
	// are still read; their handles are Legacy (CRC32C, no file header).
	v2, err := hex.DecodeString(pinnedMetadataV2)
	require.NoError(t, err)
	got, err = state.DecodeMetadata(v2)
	require.NoError(t, err)
	require.Equal(t, atVersion(2, asLegacy(m)), got)
	v1, err := hex.DecodeString("574549524d45544101002a09010201610103046e6f6e6500026f70010863686b2d34322f7863efbeadde0305030a141e03" +
		"6f7032020863686b2d34322f7907000000000201650000017301010401620000b2e5592b")
	require.NoError(t, err)
	got, err = state.DecodeMetadata(v1)
	require.NoError(t, err)
	require.Equal(t, atVersion(1, asLegacy(m)), got)
	for k, ts := range got.Tasks {
		require.False(t, ts.Finished, "%v", k)
		require.Nil(t, ts.Channels, "%v", k)
	}
}

// atVersion returns m as decoded from a file of version v (older than the
// current).
func atVersion(v uint16, m state.Metadata) state.Metadata {
	m.Version = v
	return m
}

// asLegacy returns m with every handle marked Legacy, as a file of an
// earlier version decodes.
func asLegacy(m state.Metadata) state.Metadata {
	out := m.Clone()
	for k, ts := range out.Tasks {
		if ts.Channels != nil {
			ts.Channels.Legacy = true
		}
		for op, st := range ts.Operators {
			if st.Keyed != nil {
				st.Keyed.Legacy = true
				if inc := st.Keyed.Incremental; inc != nil {
					for i := range inc.Shared {
						inc.Shared[i].Legacy = true
					}
					for i := range inc.Private {
						inc.Private[i].Legacy = true
					}
				}
			}
			if st.Operator != nil {
				st.Operator.Legacy = true
			}
			ts.Operators[op] = st
		}
		out.Tasks[k] = ts
	}
	return out
}

// pinnedMetadataV7 is the metadata of TestMetadataEncodingPinned, version
// 7 (without operator info).
const pinnedMetadataV7 = "574549524d45544107002a090100020161010003046e6f6e6500026f70010863686b2d34322f786300efbeadde000000000305030a141e036f7032020863686b2d34322f79070000000000000000000201650000017301010401620000003a6240cd"

const pinnedMetadataV6 = "574549524d45544106002a090100020161010003046e6f6e6500026f70010863686b2d34322f786300efbeadde000000000305030a141e036f7032020863686b2d34322f790700000000000000000002016500000173010104016200000076d981be"

const pinnedMetadataV5 = "574549524d45544105002a090100020161010003046e6f6e6500026f70010863686b2d34322f786300efbeadde000000000305030a141e036f7032020863686b2d34322f7907000000000000000000020165000001730101040162000000a214c32a"

const pinnedMetadataV4 = "574549524d45544104002a090100020161010003046e6f6e6500026f70010863686b2d34322f786300efbeadde000000000305030a141e036f7032020863686b2d34322f7907000000000000000000020165000001730101040162000000eeaf0259"

const pinnedMetadataV2 = "574549524d45544102002a0901020161010003046e6f6e6500026f70010863686b2d34322f7863efbeadde0305030a141e036f7032020863686b2d34322f790700000000020165000001730101040162000000cf3bd6c7"

// Version 2 adds a task's finished flag and its channel state (unaligned
// checkpoints).
func TestMetadataV2FinishedAndChannels(t *testing.T) {
	m := state.Metadata{ID: 7, Timestamp: 1, Kind: barrier.Checkpoint, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "src", Subtask: 0}: {Operators: map[string]state.OperatorSubtaskState{}, Finished: true},
		{Vertex: "sum", Subtask: 1}: {Operators: map[string]state.OperatorSubtaskState{},
			Channels: &state.ChannelStateHandle{StreamHandle: state.StreamHandle{Path: "chk-7/sum-1-channels", Size: 12, Checksum: 3},
				InputChannels: 2, Subpartitions: []int{3, 1}}},
	}}
	enc := state.EncodeMetadata(m)
	require.Equal(t, pinnedMetadataV7Channels, hex.EncodeToString(enc))
	v2, err := hex.DecodeString(pinnedMetadataV2Channels)
	require.NoError(t, err)
	gotV2, err := state.DecodeMetadata(v2)
	require.NoError(t, err)
	require.Equal(t, atVersion(2, asLegacy(m)), gotV2)
	v6, err := hex.DecodeString(pinnedMetadataV6Channels)
	require.NoError(t, err)
	gotV6, err := state.DecodeMetadata(v6)
	require.NoError(t, err)
	require.Equal(t, atVersion(6, m), gotV6)
	got, err := state.DecodeMetadata(enc)
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.Equal(t, m, got.Clone())
	require.Equal(t, []state.StreamHandle{{Path: "chk-7/sum-1-channels", Size: 12, Checksum: 3}}, m.StreamHandles())
	require.EqualValues(t, 12, m.Tasks[state.TaskKey{Vertex: "sum", Subtask: 1}].Size())
	ts, err := state.DecodeTaskSnapshot(state.EncodeTaskSnapshot(m.Tasks[state.TaskKey{Vertex: "sum", Subtask: 1}]))
	require.NoError(t, err)
	require.Equal(t, m.Tasks[state.TaskKey{Vertex: "sum", Subtask: 1}], ts)
}

// pinnedMetadataV7Channels is the same, version 7 (without operator info).
const pinnedMetadataV7Channels = "574549524d45544107000702000002037372630001000373756d01021463686b2d372f73756d2d312d6368616e6e656c730c00030000000000000002020301003069ba9a"

const pinnedMetadataV6Channels = "574549524d45544106000702000002037372630001000373756d01021463686b2d372f73756d2d312d6368616e6e656c730c0003000000000000000202030100c8b4f004"

const pinnedMetadataV5Channels = "574549524d45544105000702000002037372630001000373756d01021463686b2d372f73756d2d312d6368616e6e656c730c000300000000000000020203010031a4c3a3"

const pinnedMetadataV4Channels = "574549524d45544104000702000002037372630001000373756d01021463686b2d372f73756d2d312d6368616e6e656c730c0003000000000000000202030100c979893d"

const pinnedMetadataV2Channels = "574549524d455441020007020002037372630001000373756d01021463686b2d372f73756d2d312d6368616e6e656c730c030000000202030100c6f45dcb"

func sampleTaskSnapshot() state.TaskSnapshot {
	return state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
		"window": {
			Keyed: &state.KeyedStateHandle{
				StreamHandle: state.StreamHandle{Path: "chk-7/w-keyed", Size: 1 << 40, Checksum: 0xdeadbeef},
				KeyGroups:    keygroup.Range{Start: 32, End: 64},
				Offsets:      []int64{0, 17, 1<<53 + 1, 1<<62 + 3},
			},
			Operator: &state.OperatorStateHandle{
				StreamHandle: state.StreamHandle{Path: "chk-7/w-op", Size: 99, Checksum: 1},
				States: map[string]state.OperatorStateMeta{
					"offsets": {Distribution: state.SplitDistribute, Offsets: []int64{0, 8, 16}},
					"union":   {Distribution: state.UnionDistribute},
				},
			},
		},
		"source": {Operator: &state.OperatorStateHandle{
			StreamHandle: state.StreamHandle{Path: "chk-7/src", Size: 8},
			States:       map[string]state.OperatorStateMeta{},
		}},
		"map": {},
	}}
}

// pinnedSnapshotV7 is the same, version 7 (without operator info).
const pinnedSnapshotV7 = "57454952534e415007000003036d61700006736f75726365020963686b2d372f73726308000000000000000000000677696e646f77030d63686b2d372f772d6b6579656480808080802000efbeadde00000000204004001181808080808080108380808080808080400a63686b2d372f772d6f706300010000000000000002076f666673657473000300081005756e696f6e0100699c501e"

const pinnedSnapshotV6 = "57454952534e415006000003036d61700006736f75726365020963686b2d372f73726308000000000000000000000677696e646f77030d63686b2d372f772d6b6579656480808080802000efbeadde00000000204004001181808080808080108380808080808080400a63686b2d372f772d6f706300010000000000000002076f666673657473000300081005756e696f6e01007e0901d1"

const pinnedSnapshotV5 = "57454952534e415005000003036d61700006736f75726365020963686b2d372f73726308000000000000000000000677696e646f77030d63686b2d372f772d6b6579656480808080802000efbeadde00000000204004001181808080808080108380808080808080400a63686b2d372f772d6f706300010000000000000002076f666673657473000300081005756e696f6e0100b6c01f85"

const pinnedSnapshotV4 = "57454952534e415004000003036d61700006736f75726365020963686b2d372f73726308000000000000000000000677696e646f77030d63686b2d372f772d6b6579656480808080802000efbeadde00000000204004001181808080808080108380808080808080400a63686b2d372f772d6f706300010000000000000002076f666673657473000300081005756e696f6e0100a1554e4a"

const pinnedSnapshotV2 = "57454952534e415002000003036d61700006736f75726365020963686b2d372f7372630800000000000677696e646f77030d63686b2d372f772d6b65796564808080808020efbeadde204004001181808080808080108380808080808080400a63686b2d372f772d6f70630100000002076f666673657473000300081005756e696f6e01002857e2e9"

func TestTaskSnapshotEncoding(t *testing.T) {
	ts := sampleTaskSnapshot()
	enc := state.EncodeTaskSnapshot(ts)
	require.Equal(t, enc, state.EncodeTaskSnapshot(sampleTaskSnapshot()), "deterministic")
	require.Equal(t, pinnedSnapshotV7, hex.EncodeToString(enc), "the format is pinned: a change needs a new version")
	got, err := state.DecodeTaskSnapshot(enc)
	require.NoError(t, err)
	require.Equal(t, ts, got)
	for _, enc := range []string{pinnedSnapshotV6, pinnedSnapshotV5} {
		b, err := hex.DecodeString(enc)
		require.NoError(t, err)
		got, err = state.DecodeTaskSnapshot(b)
		require.NoError(t, err)
		require.Equal(t, ts, got, "version %s is still read", enc[17:18])
	}
	legacy := asLegacy(state.Metadata{Tasks: map[state.TaskKey]state.TaskSnapshot{{}: ts}}).Tasks[state.TaskKey{}]
	v2, err := hex.DecodeString(pinnedSnapshotV2)
	require.NoError(t, err)
	got, err = state.DecodeTaskSnapshot(v2)
	require.NoError(t, err)
	require.Equal(t, legacy, got)
	// Version 1 is still read.
	v1, err := hex.DecodeString("57454952534e4150010003036d61700006736f7572636502" +
		"0963686b2d372f7372630800000000000677696e646f77030d63686b2d372f772d6b657965648080808080" +
		"20efbeadde20400400118180808080808010838080808080808040" +
		"0a63686b2d372f772d6f70630100000002076f666673657473000300081005756e696f6e0100" +
		"e308b957")
	require.NoError(t, err)
	got, err = state.DecodeTaskSnapshot(v1)
	require.NoError(t, err)
	require.Equal(t, legacy, got)

	// Empty collections decode as DecodeMetadata decodes them.
	for _, in := range []state.TaskSnapshot{
		{},
		{Operators: map[string]state.OperatorSubtaskState{}},
	} {
		got, err := state.DecodeTaskSnapshot(state.EncodeTaskSnapshot(in))
		require.NoError(t, err)
		require.Equal(t, state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{}}, got)
	}
	got, err = state.DecodeTaskSnapshot(state.EncodeTaskSnapshot(state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
		"op": {Keyed: &state.KeyedStateHandle{Offsets: []int64{}}, Operator: &state.OperatorStateHandle{}},
	}}))
	require.NoError(t, err)
	require.Equal(t, state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
		"op": {Keyed: &state.KeyedStateHandle{}, Operator: &state.OperatorStateHandle{States: map[string]state.OperatorStateMeta{}}},
	}}, got)
}

// TestTaskSnapshotCorrupt: every truncation and every single-bit flip is
// detected, and so is well-framed nonsense; every error wraps
// ErrCorruptSnapshot.
func TestTaskSnapshotCorrupt(t *testing.T) {
	enc := state.EncodeTaskSnapshot(sampleTaskSnapshot())
	for i := range enc {
		_, err := state.DecodeTaskSnapshot(enc[:i])
		require.ErrorIs(t, err, state.ErrCorruptSnapshot, "truncated to %d", i)
		for bit := range 8 {
			b := append([]byte(nil), enc...)
			b[i] ^= 1 << bit
			_, err := state.DecodeTaskSnapshot(b)
			require.ErrorIs(t, err, state.ErrCorruptSnapshot, "flip byte %d bit %d", i, bit)
		}
	}

	body := enc[10 : len(enc)-4] // between magic+version and checksum
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"nil", nil, "bad magic or too short"},
		{"metadata", state.EncodeMetadata(state.Metadata{ID: 1}), "bad magic"},
		{"version 8", frame("WEIRSNAP", 8, body), "unsupported task snapshot version 8"},
		{"version 0", frame("WEIRSNAP", 0, body), "unsupported task snapshot version 0"},
		{"trailing byte", frame("WEIRSNAP", 4, append(append([]byte(nil), body...), 0)), "1 trailing bytes"},
		{"truncated body", frame("WEIRSNAP", 4, body[:len(body)-1]), "truncated"},
		{"empty body", frame("WEIRSNAP", 2, nil), "truncated"},
		{"huge count", frame("WEIRSNAP", 2, append([]byte{0}, binary.AppendUvarint(nil, 1<<40)...)), "truncated"},
		{"unknown flags", frame("WEIRSNAP", 2, []byte{0, 1, 2, 'o', 'p', 4}), `operator "op": unknown flags 0x4`},
		{"unknown task flags", frame("WEIRSNAP", 2, []byte{4, 0}), "unknown task flags 0x4"},
		{"v1 unknown flags", frame("WEIRSNAP", 1, []byte{1, 2, 'o', 'p', 4}), `operator "op": unknown flags 0x4`},
	} {
		_, err := state.DecodeTaskSnapshot(tc.in)
		require.ErrorIs(t, err, state.ErrCorruptSnapshot, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	// And the other way round: a snapshot is no metadata file.
	_, err := state.DecodeMetadata(enc)
	require.ErrorContains(t, err, "not a weir metadata file")
}

// frame encodes body with a valid checksum.
func frame(magic string, version uint16, body []byte) []byte {
	b := binary.LittleEndian.AppendUint16([]byte(magic), version)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

func FuzzDecodeTaskSnapshot(f *testing.F) {
	f.Add(state.EncodeTaskSnapshot(sampleTaskSnapshot()))
	f.Add(state.EncodeTaskSnapshot(state.TaskSnapshot{}))
	f.Add(frame("WEIRSNAP", 1, []byte{1, 2, 'o', 'p', 3}))
	f.Add(frame("WEIRSNAP", 2, []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 'o', 'p', 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := state.DecodeTaskSnapshot(b)
		if err != nil {
			return
		}
		enc := state.EncodeTaskSnapshot(ts)
		if binary.LittleEndian.Uint16(b[8:]) == 4 {
			require.Equal(t, b, enc, "canonical")
		}
		again, err := state.DecodeTaskSnapshot(enc)
		require.NoError(t, err)
		require.Equal(t, ts, again)
	})
}

// Version 5 records each operator's name and its states' schemas, version
// 6 its kind and its finished flag as well (version 7 has the same
// grammar); a version 4 file (without them) still reads, to the same
// metadata less them.
func TestMetadataV6OperatorInfo(t *testing.T) {
	v4, err := hex.DecodeString(pinnedMetadataV4)
	require.NoError(t, err)
	old, err := state.DecodeMetadata(v4)
	require.NoError(t, err)
	require.Len(t, old.Tasks, 2)
	m := atVersion(0, old.Clone())
	ts := m.Tasks[state.TaskKey{Vertex: "a", Subtask: 1}]
	op := ts.Operators["op"]
	op.Name, op.Kind = "running sum", "process"
	op.Schemas = []state.StateSchema{
		{Name: "_key", Kind: state.KindKey, Codec: codec.Identity{Name: "int64"}},
		{Name: "m", Kind: "map", TTL: true, Codec: codec.Identity{Name: "struct2[main.Acc](int64,int64)", Version: "(,)"},
			UserKey: codec.Identity{Name: "string"}},
	}
	ts.Operators["op"] = op
	ts.Operators["done"] = state.OperatorSubtaskState{Finished: true}
	ts.Operators["done too"] = state.OperatorSubtaskState{Name: "file sink", Kind: "file sink", Finished: true}
	enc := state.EncodeMetadata(m)
	require.Equal(t, uint16(7), binary.LittleEndian.Uint16(enc[8:]))
	got, err := state.DecodeMetadata(enc)
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.Equal(t, m, got.Clone(), "Clone keeps the info")
	snap, err := state.DecodeTaskSnapshot(state.EncodeTaskSnapshot(ts))
	require.NoError(t, err)
	require.Equal(t, ts, snap)
	// A version 4 file may not set the info flag, a version 5 file not the
	// finished flag.
	for v, flag := range map[uint16]byte{4: 8, 5: 16} {
		b := state.EncodeMetadata(state.Metadata{ID: 1, Tasks: map[state.TaskKey]state.TaskSnapshot{{Vertex: "v"}: {
			Operators: map[string]state.OperatorSubtaskState{"op": {Name: "x", Finished: flag == 16}}}}})
		binary.LittleEndian.PutUint16(b[8:], v)
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
		_, err = state.DecodeMetadata(b)
		require.ErrorContains(t, err, "unknown flags", "version %d", v)
	}
}

// A version 5 file (written by weir of that version) reads without the
// operator's kind, and without the schemas of its operator lists of bytes
// (weir's own states' schemas, which said nothing of their contents).
func TestMetadataV5Schemas(t *testing.T) {
	v5, err := hex.DecodeString(pinnedMetadataV5Schemas)
	require.NoError(t, err)
	got, err := state.DecodeMetadata(v5)
	require.NoError(t, err)
	op := got.Tasks[state.TaskKey{Vertex: "b"}].Operators["b"]
	require.Equal(t, "broadcast process", op.Name)
	require.Empty(t, op.Kind)
	require.Equal(t, []state.StateSchema{{Name: "seen", Kind: "operator list (union)", Codec: codec.Identity{Name: "int64"}}}, op.Schemas)
}

// pinnedMetadataV5Schemas: a broadcast process's broadcast state (schema
// "operator list (split)" of bytes) and a union list of int64, version 5.
const pinnedMetadataV5Schemas = "574549524d45544105000302000001016200000101620a0763686b2d332f620400000000000000000001105f62726f6164636173742f72756c657302001162726f6164636173742070726f6365737302105f62726f6164636173742f72756c6573156f70657261746f72206c697374202873706c69742900056279746573000000047365656e156f70657261746f72206c6973742028756e696f6e290005696e743634000000a7968982"

// A channel state handle records the channels of each input of the task
// (tflags bit2): they round-trip, a handle without them encodes as
// before, and counts that do not add up are an error. A task with more
// input channels than bytes follow in the file decodes too (the counts
// are not lengths of what follows).
func TestMetadataChannelInputs(t *testing.T) {
	h := &state.ChannelStateHandle{StreamHandle: state.StreamHandle{Path: "chk-7/co-0-channels", Size: 12, Checksum: 3},
		InputChannels: 300, Inputs: []int{100, 0, 200}, Subpartitions: []int{1}}
	ts := state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{}, Channels: h}
	m := state.Metadata{ID: 7, Timestamp: 1, Kind: barrier.Checkpoint, Tasks: map[state.TaskKey]state.TaskSnapshot{{Vertex: "co", Subtask: 0}: ts}}
	got, err := state.DecodeMetadata(state.EncodeMetadata(m))
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.Equal(t, m, got.Clone())
	gotTS, err := state.DecodeTaskSnapshot(state.EncodeTaskSnapshot(ts))
	require.NoError(t, err)
	require.Equal(t, ts, gotTS)

	for _, bad := range [][]int{{100, 199}, {100, 201}, {301}} {
		c := *h
		c.Inputs = bad
		_, err := state.DecodeTaskSnapshot(state.EncodeTaskSnapshot(state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{}, Channels: &c}))
		require.ErrorContains(t, err, "channels", "inputs %v", bad)
	}
}

// A version 6 file reads with its kinds and Version 6 (a restore does not
// compare a source's version-6 kind, its name), and without the schema of
// a two-phase-commit sink's transactions, a list of bytes then; version 7
// keeps that schema (the transaction codec's identity).
func TestMetadataV6Transactions(t *testing.T) {
	txns := state.StateSchema{Name: "2pc-transactions", Kind: "operator list (split)", Codec: codec.Identity{Name: "bytes"}}
	other := state.StateSchema{Name: "mine", Kind: "operator list (split)", Codec: codec.Identity{Name: "bytes"}}
	m := state.Metadata{ID: 1, Tasks: map[state.TaskKey]state.TaskSnapshot{{Vertex: "v"}: {Operators: map[string]state.OperatorSubtaskState{
		"sink": {Name: "file sink", Kind: "two-phase-commit sink", Schemas: []state.StateSchema{txns, other}},
		"src":  {Name: "orders", Kind: "orders", Finished: true}}}}}
	b := state.EncodeMetadata(m)
	got, err := state.DecodeMetadata(b)
	require.NoError(t, err)
	require.Equal(t, m, got)
	binary.LittleEndian.PutUint16(b[8:], 6)
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
	got, err = state.DecodeMetadata(b)
	require.NoError(t, err)
	require.Equal(t, uint16(6), got.Version)
	ops := got.Tasks[state.TaskKey{Vertex: "v"}].Operators
	require.Equal(t, []state.StateSchema{other}, ops["sink"].Schemas)
	require.Equal(t, "orders", ops["src"].Kind)
}
