package credit

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestTranscripts drives a Sender, and a Pool with its Channels, through
// their public methods from the datadriven transcripts in testdata/*.txt
// (github.com/cockroachdb/datadriven). A directive is one call (or one
// step of the driver's duties in doc.go); its expected output is the call's
// result, if it has one, followed by the state it leaves.
//
// Sender commands (one sender at a time; "sender" replaces it):
//
//	sender credit=N                  NewSender(N)
//	add-credit n=N                   AddCredit(N)           (ADD_CREDIT)
//	can-send data|event              CanSend; prints true or false
//	sent type=T [n=N]                Sent(T, N), N defaults to 1; prints
//	                                 first-seq=S
//	resume                           Resume()               (RESUME_CONSUMPTION)
//	need-announcement backlog=N      NeedBacklogAnnouncement(N); prints
//	                                 true or false
//
// T is data, event, prioritized-event, aligned-barrier,
// timeoutable-aligned-barrier, or a number. Every sender command but the
// queries prints the sender's state:
//
//	sender credit=N next-seq=S [blocked]
//
// Receiver commands (one gate at a time; "pool" starts a new one, channels
// are numbered in creation order):
//
//	pool floating=N                  NewPool(N)
//	channel exclusive=N              Pool.NewChannel(N); prints
//	                                 initial-credit=N
//	receive ch=I seq=S               Receive(S)
//	take ch=I                        Take(); prints exclusive or floating
//	recycle ch=I src=exclusive|floating|N
//	                                 Recycle(src)
//	backlog ch=I n=N                 OnBacklog(N)           (backlog of a
//	                                 BUFFER_RESPONSE or BACKLOG_ANNOUNCEMENT)
//	credited                         the driver's duty 5: Pool.Credited, then
//	                                 TakeUnannouncedCredit on each channel
//	                                 listed; prints "add-credit ch=I n=N" for
//	                                 each ADD_CREDIT to send and "ch=I
//	                                 nothing" for a channel whose credit was
//	                                 taken meanwhile
//	take-unannounced ch=I            TakeUnannouncedCredit(); prints n=N
//	release ch=I                     Release()
//	state                            prints the state only
//
// Every receiver command prints the state of the gate after it: the pool
// (free floating buffers of its size, channels waiting), then each channel
// (its free buffers, the buffers holding data, the floating buffers granted
// to it, free or held, the free buffers it wants, its credit not yet
// announced, the sequence number it expects next):
//
//	pool free=F/N waiting=W
//	ch=I free=N held=N floating=N required=N unannounced=N next-seq=S [waiting] [released]
//
// An error prints "error: " and its text; a panic (a broken invariant, a
// bug in the caller) prints "panic: " and its value. Either way, the state
// follows, except after a failed sender or pool, which leaves none.
//
// After a deliberate change, regenerate with
// go test ./network/credit -run TestTranscripts -rewrite and review the
// diff line by line.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a transcript", path)
		}
		tr := &transcript{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var out strings.Builder
			tr.out = &out
			tr.step(t, d)
			return out.String()
		})
	})
}

type transcript struct {
	out *strings.Builder

	sender *Sender

	pool     *Pool
	channels []*Channel
}

func (tr *transcript) printf(format string, args ...any) {
	fmt.Fprintf(tr.out, format+"\n", args...)
}

// call runs f and prints its panic, if it panics.
func (tr *transcript) call(f func()) {
	defer func() {
		if r := recover(); r != nil {
			tr.printf("panic: %v", r)
		}
	}()
	f()
}

func (tr *transcript) printErr(err error) {
	if err != nil {
		tr.printf("error: %v", err)
	}
}

func (tr *transcript) step(t *testing.T, d *datadriven.TestData) {
	switch d.Cmd {
	case "sender", "add-credit", "can-send", "sent", "resume", "need-announcement":
		tr.senderStep(t, d)
	case "pool", "channel", "receive", "take", "recycle", "backlog", "credited",
		"take-unannounced", "release", "state":
		tr.receiverStep(t, d)
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
}

func (tr *transcript) senderStep(t *testing.T, d *datadriven.TestData) {
	if d.Cmd == "sender" {
		s, err := NewSender(uint32Arg(t, d, "credit"))
		tr.printErr(err)
		tr.sender = s
		if s != nil {
			tr.printSender()
		}
		return
	}
	s := tr.sender
	if s == nil {
		d.Fatalf(t, "%s before sender", d.Cmd)
	}
	switch d.Cmd {
	case "add-credit":
		tr.printErr(s.AddCredit(uint32Arg(t, d, "n")))
	case "can-send":
		if len(d.CmdArgs) != 1 || (d.CmdArgs[0].Key != "data" && d.CmdArgs[0].Key != "event") {
			d.Fatalf(t, "can-send wants data or event")
		}
		tr.printf("%t", s.CanSend(d.CmdArgs[0].Key == "data"))
		return
	case "sent":
		typ := dataTypeArg(t, d)
		n := 1
		if d.HasArg("n") {
			d.ScanArgs(t, "n", &n)
		}
		tr.call(func() { tr.printf("first-seq=%d", s.Sent(typ, n)) })
	case "resume":
		tr.printErr(s.Resume())
	case "need-announcement":
		var backlog int
		d.ScanArgs(t, "backlog", &backlog)
		tr.printf("%t", s.NeedBacklogAnnouncement(backlog))
		return
	}
	tr.printSender()
}

func (tr *transcript) printSender() {
	s := tr.sender
	line := fmt.Sprintf("sender credit=%d next-seq=%d", s.Credit(), s.NextSequence())
	if s.Blocked() {
		line += " blocked"
	}
	tr.printf("%s", line)
}

func (tr *transcript) receiverStep(t *testing.T, d *datadriven.TestData) {
	if d.Cmd == "pool" {
		var n int
		d.ScanArgs(t, "floating", &n)
		p, err := NewPool(n)
		if err != nil {
			tr.printErr(err)
			return
		}
		tr.pool, tr.channels = p, nil
		tr.printGate()
		return
	}
	p := tr.pool
	if p == nil {
		d.Fatalf(t, "%s before pool", d.Cmd)
	}
	switch d.Cmd {
	case "channel":
		var n int
		d.ScanArgs(t, "exclusive", &n)
		c, err := p.NewChannel(n)
		tr.printErr(err)
		if c != nil {
			tr.channels = append(tr.channels, c)
			tr.printf("initial-credit=%d", c.InitialCredit())
		}
	case "receive":
		c := tr.channel(t, d)
		seq := uint32Arg(t, d, "seq")
		tr.call(func() { tr.printErr(c.Receive(seq)) })
	case "take":
		c := tr.channel(t, d)
		tr.call(func() {
			src, err := c.Take()
			if err != nil {
				tr.printErr(err)
				return
			}
			tr.printf("%v", src)
		})
	case "recycle":
		c := tr.channel(t, d)
		src := sourceArg(t, d)
		tr.call(func() { c.Recycle(src) })
	case "backlog":
		c := tr.channel(t, d)
		backlog := uint32Arg(t, d, "n")
		tr.call(func() { c.OnBacklog(backlog) })
	case "credited":
		for _, c := range p.Credited(nil) {
			if n := c.TakeUnannouncedCredit(); n > 0 {
				tr.printf("add-credit ch=%d n=%d", c.Index(), n)
			} else {
				tr.printf("ch=%d nothing", c.Index())
			}
		}
	case "take-unannounced":
		tr.printf("n=%d", tr.channel(t, d).TakeUnannouncedCredit())
	case "release":
		tr.channel(t, d).Release()
	case "state":
	}
	tr.printGate()
}

func (tr *transcript) channel(t *testing.T, d *datadriven.TestData) *Channel {
	var i int
	d.ScanArgs(t, "ch", &i)
	if i < 0 || i >= len(tr.channels) {
		d.Fatalf(t, "ch=%d: the gate has %d channels", i, len(tr.channels))
	}
	return tr.channels[i]
}

func (tr *transcript) printGate() {
	p := tr.pool
	tr.printf("pool free=%d/%d waiting=%d", p.Available(), p.Size(), p.Waiting())
	for _, c := range tr.channels {
		line := fmt.Sprintf("ch=%d free=%d held=%d floating=%d required=%d unannounced=%d next-seq=%d",
			c.Index(), c.Available(), c.Held(), c.Floating(), c.Required(), c.Unannounced(), c.NextSequence())
		if c.Waiting() {
			line += " waiting"
		}
		if c.Released() {
			line += " released"
		}
		tr.printf("%s", line)
	}
}

func uint32Arg(t *testing.T, d *datadriven.TestData, key string) uint32 {
	var s string
	d.ScanArgs(t, key, &s)
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return uint32(n)
}

var dataTypes = map[string]DataType{
	"data":                        Data,
	"event":                       Event,
	"prioritized-event":           PrioritizedEvent,
	"aligned-barrier":             AlignedBarrier,
	"timeoutable-aligned-barrier": TimeoutableAlignedBarrier,
}

func dataTypeArg(t *testing.T, d *datadriven.TestData) DataType {
	var s string
	d.ScanArgs(t, "type", &s)
	if typ, ok := dataTypes[s]; ok {
		return typ
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		d.Fatalf(t, "unknown data type %q", s)
	}
	return DataType(n)
}

func sourceArg(t *testing.T, d *datadriven.TestData) Source {
	var s string
	d.ScanArgs(t, "src", &s)
	switch s {
	case "exclusive":
		return Exclusive
	case "floating":
		return Floating
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		d.Fatalf(t, "unknown source %q", s)
	}
	return Source(n)
}
