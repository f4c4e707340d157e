// Command tcpproducer serves one result partition over weir's TCP data
// plane (docs/protocol.md) and exits once every subpartition has been read to
// its end. Its defaults are those of tcpconsumer, which reads and checks
// what it serves:
//
//	go run ./examples/tcpproducer &   # 1,000,000 records in 4 subpartitions on 127.0.0.1:7070
//	go run ./examples/tcpconsumer
//	go run ./examples/tcpproducer -listen 127.0.0.1:0 -partition <uuid> -subpartitions K -records N [-token T] [-record-size B]
//
// Its first line on stdout is "listening <host:port>". Subpartition s
// holds, in order, the records i in [0, N) with i mod K = s, each the
// 8-byte big-endian i padded with zero bytes to B bytes, then the end of
// partition. Every subpartition is filled by its own goroutine from its
// own buffer pool, so a subpartition nobody reads never holds back the
// others. The command exits 0 once every end of partition has been sent
// and the connections that read them have closed, non-zero on error,
// including a subpartition whose reader went away before its end of
// partition (a subpartition is read once).
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/wire"
)

// DefaultPartition is the partition ID tcpproducer serves and tcpconsumer
// reads unless told otherwise.
const DefaultPartition = "00000000-0000-4000-8000-000000007070"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tcpproducer:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:7070", "address to listen on (port 0: any free port)")
	partition := flag.String("partition", DefaultPartition, "partition ID (UUID) to serve")
	subs := flag.Int("subpartitions", 4, "number of subpartitions K")
	records := flag.Int64("records", 1_000_000, "number of records N")
	token := flag.String("token", "", "token clients must send in HELLO")
	recSize := flag.Int("record-size", 8, "bytes per record B (at least 8)")
	segSize := flag.Int("segment-size", buffer.DefaultSegmentSize, "buffer size in bytes")
	perSub := flag.Int("buffers", 8, "buffers per subpartition")
	verbose := flag.Bool("v", false, "log connections to stderr")
	flag.Parse()

	id, err := uuid.Parse(*partition)
	switch {
	case err != nil:
		return fmt.Errorf("-partition: %w", err)
	case *subs < 1:
		return fmt.Errorf("-subpartitions %d: must be at least 1", *subs)
	case *records < 0:
		return fmt.Errorf("-records %d: must not be negative", *records)
	case *recSize < 8:
		return fmt.Errorf("-record-size %d: must be at least 8", *recSize)
	case *perSub < 2:
		return fmt.Errorf("-buffers %d: must be at least 2", *perSub)
	}
	log := zap.NewNop()
	if *verbose {
		if log, err = zap.NewDevelopment(); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: *segSize, NumSegments: *subs * *perSub})
	if err != nil {
		return err
	}
	parts := make([]*network.ResultPartition, *subs)
	sps := make([]*network.Subpartition, *subs)
	for s := range parts {
		pool, err := g.NewLocalPool(2, *perSub)
		if err != nil {
			return err
		}
		p, err := network.NewResultPartition(uuid.New(), fmt.Sprintf("%s[%d]", id, s), 1, pool)
		if err != nil {
			return err
		}
		p.SetContext(ctx)
		parts[s], sps[s] = p, p.Subpartition(0)
	}
	pm := network.NewPartitionManager()
	if err := pm.RegisterSubpartitions(id, sps); err != nil {
		return err
	}
	done, err := pm.Done(id)
	if err != nil {
		return err
	}
	srv, err := network.NewServer(network.ServerConfig{Token: []byte(*token)}, pm, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	// One goroutine per subpartition: each blocks only on its own pool.
	var wg sync.WaitGroup
	errs := make(chan error, *subs)
	eop := wire.AppendEvent(nil, wire.Event{Kind: wire.EventEndOfPartition})
	k := int64(*subs)
	for s, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := make([]byte, *recSize)
			for i := int64(s); i < *records; i += k {
				binary.BigEndian.PutUint64(rec, uint64(i))
				if err := p.Write(0, rec); err != nil {
					p.Release()
					errs <- err
					return
				}
			}
			p.Finish(eop)
			p.ReleaseProducer()
		}()
	}
	producersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(producersDone)
	}()

	var runErr error
	select {
	case <-done:
	case err := <-served:
		runErr = fmt.Errorf("server: %w", err)
	case err := <-errs:
		runErr = fmt.Errorf("producer: %w", err)
	case <-ctx.Done():
		runErr = ctx.Err()
	}
	srv.Close()
	if runErr == nil {
		if _, abandoned, _ := pm.Progress(id); abandoned > 0 {
			runErr = fmt.Errorf("%d of %d subpartitions lost their reader before their end of partition", abandoned, *subs)
		}
	}
	if runErr != nil {
		stop() // unblock producers waiting for buffers
	}
	<-producersDone
	select {
	case err := <-errs:
		if runErr == nil && !errors.Is(err, context.Canceled) {
			runErr = fmt.Errorf("producer: %w", err)
		}
	default:
	}
	return runErr
}
