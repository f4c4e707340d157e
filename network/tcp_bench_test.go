package network

import (
	"context"
	"encoding/binary"
	"net"
	"testing"

	"github.com/weirstream/weir/buffer"
)

// tcpExchange streams n records of recSize bytes from a producer goroutine
// through a real partition, the TCP server, a loopback connection, the
// client, a remote channel, an input gate and a deserializer on the
// calling goroutine.
func tcpExchange(b *testing.B, n, recSize int) {
	pm := NewPartitionManager()
	srv, err := NewServer(ServerConfig{}, pm, nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), ln) }()
	defer func() {
		srv.Close()
		<-served
	}()

	pg, err := buffer.NewGlobalPool(buffer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ppool, err := pg.NewLocalPool(2, 2+8)
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewResultPartition(newID(), "bench", 1, ppool)
	if err != nil {
		b.Fatal(err)
	}
	if err := pm.Register(p); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.SetContext(ctx)

	cm, err := NewConnectionManager(ClientConfig{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	cg, err := buffer.NewGlobalPool(buffer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	cpool, err := cg.NewLocalPool(2+8, 2+8)
	if err != nil {
		b.Fatal(err)
	}
	rb, err := NewRemoteBuffers(cpool, RemoteBuffersConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ch, err := NewRemoteChannel("bench", cm, rb, RemoteChannelConfig{Addr: ln.Addr().String(), Partition: p.ID()})
	if err != nil {
		b.Fatal(err)
	}
	gate := NewInputGate("bench", []InputChannel{ch})
	if err := gate.Start(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu := startCPU()
	done := make(chan error, 1)
	go func() {
		rec := make([]byte, recSize)
		for i := 0; i < n; i++ {
			binary.BigEndian.PutUint64(rec, uint64(i))
			if err := p.Write(0, rec); err != nil {
				done <- err
				return
			}
		}
		p.Finish(eop)
		p.ReleaseProducer()
		done <- nil
	}()
	got, sum := drainGate(b, gate)
	b.StopTimer()
	cpu.report(b)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	gate.Close()
	cm.Close()
	cpool.Close()
	if got != uint64(n) || sum != uint64(n)*uint64(n-1)/2 {
		b.Fatalf("got %d records (sum %d), want %d", got, sum, n)
	}
	if cg.InUse() != 0 {
		b.Fatalf("%d consumer segments leaked", cg.InUse())
	}
}

// BenchmarkTCPExchange: one producer and one consumer over loopback TCP
// through the whole partition → server → client → gate → deserializer
// path.
func BenchmarkTCPExchange(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
	}{{"16B", 16}, {"4KiB", 4096}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(bc.size))
			tcpExchange(b, b.N, bc.size)
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/s, "records/s")
			b.ReportMetric(float64(b.N)*float64(bc.size)/s/1e6, "MB/s")
		})
	}
}
