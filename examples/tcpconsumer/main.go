// Command tcpconsumer reads every subpartition of a partition served by
// tcpproducer (or any server speaking docs/protocol.md) with weir's own TCP
// client, remote channels and input gate, checks every record and prints a
// summary. Its defaults are tcpproducer's:
//
//	go run ./examples/tcpproducer &   # 1,000,000 records in 4 subpartitions on 127.0.0.1:7070
//	go run ./examples/tcpconsumer     # waits up to -wait for the producer, reads and checks them
//	go run ./examples/tcpconsumer -connect host:port -partition <uuid> -subpartitions K -records N [-token T] [-record-size B]
//
// Subpartition s must deliver, in order, the records i in [0, N) with
// i mod K = s, each the 8-byte big-endian i padded with zero bytes to B
// bytes, then its end of partition. It exits non-zero on any mismatch.
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/wire"
)

// defaultPartition is tcpproducer's DefaultPartition.
const defaultPartition = "00000000-0000-4000-8000-000000007070"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tcpconsumer:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("connect", "127.0.0.1:7070", "server address host:port")
	partition := flag.String("partition", defaultPartition, "partition ID (UUID) to read")
	subs := flag.Int("subpartitions", 4, "number of subpartitions K")
	records := flag.Int64("records", 1_000_000, "number of records N")
	wait := flag.Duration("wait", 10*time.Second, "how long to wait for the server to accept connections")
	token := flag.String("token", "", "token to send in HELLO")
	recSize := flag.Int("record-size", 8, "bytes per record B (at least 8)")
	segSize := flag.Int("segment-size", buffer.DefaultSegmentSize, "receive buffer size in bytes (at least the producer's)")
	verbose := flag.Bool("v", false, "log to stderr")
	flag.Parse()

	id, err := uuid.Parse(*partition)
	switch {
	case *addr == "":
		return fmt.Errorf("-connect is required")
	case err != nil:
		return fmt.Errorf("-partition: %w", err)
	case *subs < 1:
		return fmt.Errorf("-subpartitions %d: must be at least 1", *subs)
	case *records < 0:
		return fmt.Errorf("-records %d: must not be negative", *records)
	case *recSize < 8:
		return fmt.Errorf("-record-size %d: must be at least 8", *recSize)
	}
	if err := awaitServer(*addr, *wait); err != nil {
		return err
	}
	log := zap.NewNop()
	if *verbose {
		if log, err = zap.NewDevelopment(); err != nil {
			return err
		}
	}

	cm, err := network.NewConnectionManager(network.ClientConfig{Token: []byte(*token)}, log)
	if err != nil {
		return err
	}
	defer cm.Close()
	rcfg := network.RemoteBuffersConfig{}.WithDefaults()
	need := *subs*rcfg.Exclusive + rcfg.Floating
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: *segSize, NumSegments: need})
	if err != nil {
		return err
	}
	pool, err := g.NewLocalPool(need, need)
	if err != nil {
		return err
	}
	defer pool.Close()
	rb, err := network.NewRemoteBuffers(pool, rcfg)
	if err != nil {
		return err
	}
	chans := make([]network.InputChannel, *subs)
	for s := range chans {
		ch, err := network.NewRemoteChannel(fmt.Sprintf("%s[%d]", id, s), cm, rb,
			network.RemoteChannelConfig{Addr: *addr, Partition: id, Subpartition: s})
		if err != nil {
			return err
		}
		chans[s] = ch
	}
	gate := network.NewInputGate("tcpconsumer", chans)
	defer gate.Close()

	start := time.Now()
	if err := gate.Start(); err != nil {
		return err
	}
	k := int64(*subs)
	next := make([]int64, *subs) // next expected record per subpartition
	ds := make([]*network.Deserializer, *subs)
	for s := range ds {
		next[s] = int64(s)
		ds[s] = network.NewDeserializer(fmt.Sprintf("sub %d", s), 0)
		defer ds[s].Close()
	}
	zeros := make([]byte, *recSize)
	var total, bytesIn int64
	for ended := 0; ended < *subs; {
		s, b, err := gate.PollNext()
		if err != nil {
			return err
		}
		if b == nil {
			<-gate.Ready()
			continue
		}
		if !b.IsData() {
			ev, err := wire.DecodeEvent(b.Bytes())
			b.Release()
			if err != nil {
				return fmt.Errorf("subpartition %d: %w", s, err)
			}
			if ev.Kind == wire.EventEndOfPartition {
				if next[s] < *records {
					return fmt.Errorf("subpartition %d ended early: record %d expected", s, next[s])
				}
				ended++
			}
			continue
		}
		bytesIn += int64(b.Len())
		d := ds[s]
		d.SetBuffer(b)
		for {
			rec, ok, err := d.Next()
			if err != nil {
				return fmt.Errorf("subpartition %d: %w", s, err)
			}
			if !ok {
				break
			}
			want := next[s]
			switch {
			case want >= *records:
				return fmt.Errorf("subpartition %d: record beyond %d", s, *records)
			case len(rec) != *recSize:
				return fmt.Errorf("subpartition %d record %d: %d bytes, want %d", s, want, len(rec), *recSize)
			case binary.BigEndian.Uint64(rec) != uint64(want):
				return fmt.Errorf("subpartition %d: record %d, want %d", s, binary.BigEndian.Uint64(rec), want)
			case !bytes.Equal(rec[8:], zeros[8:]):
				return fmt.Errorf("subpartition %d record %d: padding not zero", s, want)
			}
			next[s] += k
			total++
		}
	}
	if total != *records {
		return fmt.Errorf("received %d records, want %d", total, *records)
	}
	el := time.Since(start)
	fmt.Printf("ok: %d records of %d bytes from %d subpartitions, %d payload bytes in %v (%.1f M records/s, %.1f MB/s)\n",
		total, *recSize, *subs, bytesIn, el.Round(time.Millisecond),
		float64(total)/el.Seconds()/1e6, float64(bytesIn)/el.Seconds()/1e6)
	return nil
}

// awaitServer waits until addr accepts TCP connections, for up to wait:
// the producer may still be starting.
func awaitServer(addr string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no server at %s after %v (start tcpproducer first): %w", addr, wait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
