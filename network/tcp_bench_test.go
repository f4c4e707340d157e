package network

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/wire"
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

// tcpRecordPipeline is BenchmarkTCPExchange/16B reduced to its physical
// work, the yardstick that benchmark is measured against (the TCP
// counterpart of idealPipeline): a producer goroutine encodes n records of
// idealRecord bytes (u32 length + key + value) into a 32 KiB payload
// behind room for a BUFFER_RESPONSE header, puts the header there and
// sends header and payload with one Write on a loopback TCP connection;
// the calling goroutine reads each frame through a 128 KiB bufio.Reader
// (the client's read buffer), copies the payload into a 32 KiB buffer, as
// the client does into a pooled one, and decodes, checks and sums every
// record. A record never spans buffers; there are no pools, credits,
// queues, reference counts or events.
func tcpRecordPipeline(b *testing.B, n int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	wc, err := net.Dial("tcp", ln.Addr().String())
	ln.Close()
	if err != nil {
		b.Fatal(err)
	}
	defer wc.Close()
	rc := <-accepted
	if rc == nil {
		b.Fatal("accept failed")
	}
	defer rc.Close()

	hdrLen := len(wire.AppendBufferResponseHeader(nil, wire.BufferResponseHeader{}))
	b.ResetTimer()
	cpu := startCPU()
	sent := make(chan error, 1)
	go func() {
		frame := make([]byte, hdrLen+buffer.DefaultSegmentSize)
		for i, seq := 0, uint32(0); i < n; seq++ {
			pos, c := encodeIdeal(frame[hdrLen:], i, n-i)
			i += c
			wire.AppendBufferResponseHeader(frame[:0], wire.BufferResponseHeader{Sequence: seq, DataType: wire.DataBuffer, Size: uint32(pos)})
			if _, err := wc.Write(frame[:hdrLen+pos]); err != nil {
				sent <- err
				return
			}
		}
		sent <- wc.(*net.TCPConn).CloseWrite()
	}()
	br := bufio.NewReaderSize(rc, 128<<10)
	hdr := make([]byte, hdrLen)
	payload := make([]byte, buffer.DefaultSegmentSize)
	var got, sum uint64
	for {
		if _, err := io.ReadFull(br, hdr); err == io.EOF {
			break
		} else if err != nil {
			b.Fatal(err)
		}
		size := int(binary.BigEndian.Uint32(hdr[hdrLen-4:]))
		if binary.BigEndian.Uint32(hdr[4:]) != wire.Magic || hdr[8] != byte(wire.TypeBufferResponse) ||
			int(binary.BigEndian.Uint32(hdr))+4 != hdrLen+size || size > len(payload) {
			b.Fatalf("TCP record pipeline: bad frame header % x", hdr)
		}
		data := payload[:size]
		if _, err := io.ReadFull(br, data); err != nil {
			b.Fatal(err)
		}
		s, c, ok := decodeIdeal(data)
		if !ok {
			b.Fatalf("TCP record pipeline: corrupt payload after %d records", got+c)
		}
		sum, got = sum+s, got+c
	}
	b.StopTimer()
	cpu.report(b)
	if err := <-sent; err != nil {
		b.Fatal(err)
	}
	if want := 2 * uint64(n) * uint64(n-1); got != uint64(n) || sum != want {
		b.Fatalf("TCP record pipeline: got %d records (sum %d), want %d (sum %d)", got, sum, n, want)
	}
}

// BenchmarkTCPRecordPipeline is the ceiling for BenchmarkTCPExchange/16B
// on this machine: 16-byte records over loopback TCP with nothing but
// encoding, one Write per 32 KiB buffer, reading and decoding. Compare
// the two in one run (make baseline).
func BenchmarkTCPRecordPipeline(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(idealRecord)
	tcpRecordPipeline(b, b.N)
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/s, "records/s")
	b.ReportMetric(float64(b.N)*idealRecord/s/1e6, "MB/s")
}
