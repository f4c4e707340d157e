package network

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/weirstream/weir/network/wire"
)

// FuzzServerConn feeds a live server arbitrary client bytes after a valid
// HELLO: the server must answer or close, never panic or hang, and keep
// serving.
func FuzzServerConn(f *testing.F) {
	_, p := newTestPartition(f, 2)
	writeBuffer(f, p, 0, 1)
	writeBuffer(f, p, 1, 2)
	ts := startServer(f, ServerConfig{HelloTimeout: time.Second, LingerTimeout: 100 * time.Millisecond})
	if err := ts.parts.Register(p); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(p.Release)
	r := uuid.MustParse("00000000-0000-0000-0000-000000000001")
	var seed []byte
	seed = wire.AppendPartitionRequest(seed, wire.PartitionRequest{Partition: p.ID(), Subpartition: 0, Receiver: r, InitialCredit: 1})
	seed = wire.AppendAddCredit(seed, wire.AddCredit{Receiver: r, Credit: 3})
	seed = wire.AppendResumeConsumption(seed, wire.ResumeConsumption{Receiver: r})
	seed = wire.AppendNewBufferSize(seed, wire.NewBufferSize{Receiver: r, Size: 10})
	seed = wire.AppendCancelPartition(seed, wire.CancelPartition{Receiver: r})
	f.Add(seed)
	f.Add(wire.AppendClose(nil))
	f.Add(wire.AppendAddCredit(nil, wire.AddCredit{Receiver: r, Credit: 0}))
	f.Add([]byte("\x00\x00\x00\x05WEIR\x7f"))
	hello := wire.AppendHello(nil, wire.Hello{Version: wire.Version})
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(append(append([]byte(nil), hello...), data...)); err != nil {
			return // the server may already have closed
		}
		nc.(*net.TCPConn).CloseWrite()
		if _, err := io.Copy(io.Discard, nc); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("server neither answered nor closed: %v", err)
			}
		}
	})
}
