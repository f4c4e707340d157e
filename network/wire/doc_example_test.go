package wire

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// This file keeps the worked example of docs/protocol.md, section "Worked
// example", honest: it encodes the example's frames with the real encoder
// and checks them against the hex written below, which is the hex printed
// in the document; TestDocExampleInDocument then reads the document itself
// and checks every hex block and every byte table of that section against
// the same frames. Change the example in both places, or this fails.

// docDocument is the document, relative to this package's directory.
const docDocument = "../../docs/protocol.md"

// docSection is the heading of the example's section.
const docSection = "## Worked example"

var (
	docPartition = uuid.MustParse("11111111-2222-3333-4444-555555555555")
	docReceiver  = uuid.MustParse("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
	docWatermark = int64(1_700_000_000_000) // 2023-11-14T22:13:20Z
)

type docExample struct {
	name  string
	dir   Direction
	frame []byte // encoded with the real encoder
	hex   string // as printed in docs/protocol.md
}

// docRecords is the payload of the example's data buffer: the records
// "ping" and "pong", each behind its u32 length.
func docRecords() []byte {
	var p []byte
	for _, r := range []string{"ping", "pong"} {
		p = append(p, 0, 0, 0, byte(len(r)))
		p = append(p, r...)
	}
	return p
}

// docExamples returns the frames of the worked example, in the order the
// document shows them.
func docExamples() []docExample {
	records := docRecords()
	watermark := AppendEvent(nil, Event{Kind: EventWatermark, Watermark: docWatermark})
	return []docExample{
		{
			name:  "HELLO",
			dir:   ServerBound,
			frame: AppendHello(nil, Hello{Version: Version, Token: []byte("weir")}),
			hex:   "00 00 00 0f 57 45 49 52 01 00 01 00 00 00 04 77 65 69 72",
		},
		{
			name:  "HELLO_ACK",
			dir:   ClientBound,
			frame: AppendHelloAck(nil, HelloAck{Version: Version}),
			hex:   "00 00 00 07 57 45 49 52 02 00 01",
		},
		{
			name: "PARTITION_REQUEST",
			dir:  ServerBound,
			frame: AppendPartitionRequest(nil, PartitionRequest{Partition: docPartition, Subpartition: 3,
				Receiver: docReceiver, InitialCredit: 2}),
			hex: "00 00 00 2d 57 45 49 52 10 " +
				"11 11 11 11 22 22 33 33 44 44 55 55 55 55 55 55 " +
				"00 00 00 03 " +
				"aa aa aa aa bb bb cc cc dd dd ee ee ee ee ee ee " +
				"00 00 00 02",
		},
		{
			name: "BUFFER_RESPONSE data",
			dir:  ClientBound,
			frame: AppendBufferResponse(nil, BufferResponseHeader{Receiver: docReceiver, Sequence: 0, Backlog: 0,
				DataType: DataBuffer, Size: uint32(len(records))}, records),
			hex: "00 00 00 35 57 45 49 52 20 " +
				"aa aa aa aa bb bb cc cc dd dd ee ee ee ee ee ee " +
				"00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 10 " +
				"00 00 00 04 70 69 6e 67 00 00 00 04 70 6f 6e 67",
		},
		{
			name: "BUFFER_RESPONSE watermark",
			dir:  ClientBound,
			frame: AppendBufferResponse(nil, BufferResponseHeader{Receiver: docReceiver, Sequence: 1, Backlog: 0,
				DataType: DataTypeForEvent(Event{Kind: EventWatermark}), Size: uint32(len(watermark))}, watermark),
			hex: "00 00 00 2e 57 45 49 52 20 " +
				"aa aa aa aa bb bb cc cc dd dd ee ee ee ee ee ee " +
				"00 00 00 01 00 00 00 00 01 00 00 00 00 00 00 09 " +
				"05 00 00 01 8b cf e5 68 00",
		},
	}
}

// spacedHex formats b as lower-case hex bytes separated by single spaces.
func spacedHex(b []byte) string {
	s := make([]string, len(b))
	for i, c := range b {
		s[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(s, " ")
}

// parseHex parses whitespace-separated hex bytes.
func parseHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	require.NoError(t, err, "hex %q", s)
	return b
}

func TestDocExampleHex(t *testing.T) {
	for _, ex := range docExamples() {
		require.Equal(t, ex.hex, spacedHex(ex.frame), "%s: the encoder disagrees with the example", ex.name)
	}
}

// TestDocExampleDecodes reads the example back with a Reader, checking the
// fields the document explains.
func TestDocExampleDecodes(t *testing.T) {
	ex := docExamples()

	f := readOne(t, ex[0])
	require.Equal(t, Hello{Version: 1, Flags: 0, Token: []byte("weir")}, f.Hello)

	f = readOne(t, ex[1])
	require.Equal(t, HelloAck{Version: 1}, f.HelloAck)

	f = readOne(t, ex[2])
	require.Equal(t, PartitionRequest{Partition: docPartition, Subpartition: 3, Receiver: docReceiver, InitialCredit: 2}, f.PartitionRequest)

	r := newReader(t, bytes.NewReader(ex[3].frame), ClientBound)
	f, err := r.ReadFrame()
	require.NoError(t, err)
	h := f.BufferResponse
	require.Equal(t, docReceiver, h.Receiver)
	require.Equal(t, uint32(0), h.Sequence)
	require.Equal(t, DataBuffer, h.DataType)
	require.Empty(t, h.Partials)
	require.Equal(t, uint32(16), h.Size)
	p := make([]byte, h.Size)
	require.NoError(t, r.ReadPayload(p))
	require.Equal(t, docRecords(), p)

	r = newReader(t, bytes.NewReader(ex[4].frame), ClientBound)
	f, err = r.ReadFrame()
	require.NoError(t, err)
	h = f.BufferResponse
	require.Equal(t, uint32(1), h.Sequence)
	require.Equal(t, DataEvent, h.DataType)
	p = make([]byte, h.Size)
	require.NoError(t, r.ReadPayload(p))
	e, err := DecodeEvent(p)
	require.NoError(t, err)
	require.Equal(t, Event{Kind: EventWatermark, Watermark: docWatermark}, e)
}

func readOne(t *testing.T, ex docExample) *Frame {
	t.Helper()
	r := newReader(t, bytes.NewReader(ex.frame), ex.dir)
	f, err := r.ReadFrame()
	require.NoError(t, err, ex.name)
	return f
}

// TestDocExampleInDocument checks the section "Worked example" of
// docs/protocol.md: its ```hex blocks, in order, are the example's frames,
// and so are its byte tables (| offset | `bytes` | …), whose offsets must
// count the bytes before each row.
func TestDocExampleInDocument(t *testing.T) {
	doc, err := os.ReadFile(docDocument)
	require.NoError(t, err)
	blocks, tables := docSectionBytes(t, string(doc))
	ex := docExamples()
	require.Len(t, blocks, len(ex), "hex blocks in %q", docSection)
	require.Len(t, tables, len(ex), "byte tables in %q", docSection)
	for i, e := range ex {
		require.Equal(t, spacedHex(e.frame), spacedHex(blocks[i]), "hex block %d (%s)", i+1, e.name)
		require.Equal(t, spacedHex(e.frame), spacedHex(tables[i]), "byte table %d (%s)", i+1, e.name)
	}
}

// docSectionBytes returns the bytes of every ```hex block and every byte
// table of the worked example's section.
func docSectionBytes(t *testing.T, doc string) (blocks, tables [][]byte) {
	t.Helper()
	lines := strings.Split(doc, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == docSection {
			start = i + 1
			break
		}
	}
	require.NotEqual(t, -1, start, "no section %q in %s", docSection, docDocument)
	var (
		inHex   bool
		hexText strings.Builder
		table   []byte
		inTable bool
	)
	endTable := func() {
		if inTable {
			tables = append(tables, table)
		}
		table, inTable = nil, false
	}
	for n, l := range lines[start:] {
		line := n + start + 1
		if strings.HasPrefix(l, "## ") {
			break
		}
		switch {
		case inHex && strings.HasPrefix(l, "```"):
			blocks = append(blocks, parseHex(t, hexText.String()))
			hexText.Reset()
			inHex = false
		case inHex:
			hexText.WriteString(l + " ")
		case strings.TrimSpace(l) == "```hex":
			endTable()
			inHex = true
		case strings.HasPrefix(l, "|"):
			cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
			first := strings.TrimSpace(cells[0])
			if first == "offset" || strings.HasPrefix(first, "---") {
				continue // header or separator
			}
			require.GreaterOrEqual(t, len(cells), 2, "line %d: table row without a bytes column", line)
			off, err := strconv.Atoi(first)
			require.NoError(t, err, "line %d: offset %q", line, first)
			require.Equal(t, len(table), off, "line %d: offset does not count the bytes before the row", line)
			table = append(table, parseHex(t, strings.Trim(strings.TrimSpace(cells[1]), "`"))...)
			inTable = true
		default:
			endTable()
		}
	}
	require.False(t, inHex, "unterminated hex block")
	endTable()
	return blocks, tables
}
