package network

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/credit"
	"github.com/weirstream/weir/network/wire"
)

// producer fills k single-subpartition partitions, registered under one
// ID, each from its own goroutine and pool: subpartition s gets the
// records i < n with i mod k = s (8-byte big-endian i padded to recSize).
type producer struct {
	id    uuid.UUID
	g     *buffer.GlobalPool
	parts []*ResultPartition
	wg    sync.WaitGroup
	errs  chan error
	ctx   context.Context
	stop  context.CancelFunc
}

func startProducer(t testing.TB, pm *PartitionManager, k, n, recSize int) *producer {
	t.Helper()
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 256, NumSegments: 16 * k})
	require.NoError(t, err)
	pr := &producer{id: uuid.New(), g: g, errs: make(chan error, k)}
	pr.ctx, pr.stop = context.WithCancel(context.Background())
	subs := make([]*Subpartition, k)
	for s := range k {
		pool, err := g.NewLocalPool(2, 8)
		require.NoError(t, err)
		p, err := NewResultPartition(uuid.New(), fmt.Sprintf("producer[%d]", s), 1, pool)
		require.NoError(t, err)
		p.SetContext(pr.ctx)
		pr.parts = append(pr.parts, p)
		subs[s] = p.Subpartition(0)
	}
	require.NoError(t, pm.RegisterSubpartitions(pr.id, subs))
	for s, p := range pr.parts {
		pr.wg.Add(1)
		go func() {
			defer pr.wg.Done()
			rec := make([]byte, recSize)
			for i := s; i < n; i += k {
				if i&0xfff == s && pr.ctx.Err() != nil {
					p.Release()
					return
				}
				binary.BigEndian.PutUint64(rec, uint64(i))
				if err := p.Write(0, rec); err != nil {
					p.Release()
					pr.errs <- err
					return
				}
			}
			p.Finish(eop)
			p.ReleaseProducer()
		}()
	}
	t.Cleanup(func() {
		pr.stop()
		pr.wg.Wait()
	})
	return pr
}

// remoteGate is a consumer's gate of remote channels with its memory.
type remoteGate struct {
	g     *buffer.GlobalPool
	pool  *buffer.LocalPool
	rb    *RemoteBuffers
	gate  *InputGate
	chans []*RemoteChannel
}

func newRemoteGate(t testing.TB, cm *ConnectionManager, addr string, part uuid.UUID, subs []int, segSize int) *remoteGate {
	t.Helper()
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: segSize, NumSegments: 2*len(subs) + 8})
	require.NoError(t, err)
	need := 2*len(subs) + 8
	pool, err := g.NewLocalPool(need, need)
	require.NoError(t, err)
	rb, err := NewRemoteBuffers(pool, RemoteBuffersConfig{})
	require.NoError(t, err)
	rg := &remoteGate{g: g, pool: pool, rb: rb}
	var ics []InputChannel
	for _, s := range subs {
		ch, err := NewRemoteChannel(fmt.Sprintf("remote[%d]", s), cm, rb, RemoteChannelConfig{Addr: addr, Partition: part, Subpartition: s})
		require.NoError(t, err)
		rg.chans = append(rg.chans, ch)
		ics = append(ics, ch)
	}
	rg.gate = NewInputGate("remote", ics)
	return rg
}

// consume reads the gate to the end of every channel, checking that
// channel c (subpartition subs[c]) delivers the records i < n with
// i mod k = subs[c], in order. It returns the first error.
func (rg *remoteGate) consume(subs []int, k, n, recSize int) error {
	ds := make([]*Deserializer, len(subs))
	next := make([]int, len(subs))
	for c := range ds {
		ds[c] = NewDeserializer(fmt.Sprintf("d%d", c), 0)
		next[c] = subs[c]
	}
	defer func() {
		for _, d := range ds {
			d.Close()
		}
	}()
	ended := 0
	for ended < len(subs) {
		c, b, err := rg.gate.PollNext()
		if err != nil {
			return err
		}
		if b == nil {
			<-rg.gate.Ready()
			continue
		}
		if !b.IsData() {
			isEnd := b.Len() > 0 && b.Bytes()[0] == byte(wire.EventEndOfPartition)
			b.Release()
			if isEnd {
				if next[c] < n {
					return fmt.Errorf("channel %d ended at record %d of %d", c, next[c], n)
				}
				ended++
			}
			continue
		}
		d := ds[c]
		d.SetBuffer(b)
		for {
			rec, ok, err := d.Next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if len(rec) != recSize || binary.BigEndian.Uint64(rec) != uint64(next[c]) {
				return fmt.Errorf("channel %d: record %x, want %d", c, rec[:min(len(rec), 16)], next[c])
			}
			for _, x := range rec[8:] {
				if x != 0 {
					return fmt.Errorf("channel %d: record %d padding not zero", c, next[c])
				}
			}
			next[c] += k
		}
	}
	return nil
}

// close closes the gate; call after the manager is closed to check that
// every segment came home.
func (rg *remoteGate) closeAndCheck(t testing.TB) {
	t.Helper()
	rg.gate.Close()
	rg.pool.Close()
	require.Equal(t, 0, rg.g.InUse(), "consumer segments leaked")
}

func newManager(t testing.TB, cfg ClientConfig) *ConnectionManager {
	t.Helper()
	cm, err := NewConnectionManager(cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cm.Close() })
	return cm
}

func TestTCPExchange(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	const k, n = 4, 20000
	pr := startProducer(t, ts.parts, k, n, 24)
	cm := newManager(t, ClientConfig{})
	subs := []int{0, 1, 2, 3}
	rg := newRemoteGate(t, cm, ts.addr, pr.id, subs, 512)
	require.NoError(t, rg.gate.Start())
	require.NoError(t, rg.consume(subs, k, n, 24))
	pr.wg.Wait()
	done, err := ts.parts.Done(pr.id)
	require.NoError(t, err)
	require.Equal(t, 1, cm.NumConnections())
	require.NoError(t, cm.Close())
	<-done // every end of partition sent and the connection closed
	rg.closeAndCheck(t)
	waitFor(t, func() bool { return pr.g.InUse() == 0 })
}

// TestTCPSlowChannel: channels of two gates share one connection; the
// consumer of one gate reads nothing until the other gate has read
// everything. The stalled channel must not hold up the others.
func TestTCPSlowChannel(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	const k, n = 8, 40000
	pr := startProducer(t, ts.parts, k, n, 16)
	cm := newManager(t, ClientConfig{})
	fast := []int{0, 1, 2, 3, 4, 5, 6}
	slow := []int{7}
	fg := newRemoteGate(t, cm, ts.addr, pr.id, fast, 256)
	sg := newRemoteGate(t, cm, ts.addr, pr.id, slow, 256)
	require.NoError(t, sg.gate.Start())
	require.NoError(t, fg.gate.Start())
	require.NoError(t, fg.consume(fast, k, n, 16))
	require.Equal(t, 1, cm.NumConnections(), "one connection for both gates")
	require.NoError(t, sg.consume(slow, k, n, 16))
	require.NoError(t, cm.Close())
	fg.closeAndCheck(t)
	sg.closeAndCheck(t)
	pr.wg.Wait()
	waitFor(t, func() bool { return pr.g.InUse() == 0 })
}

// faultyConn lets a test cut a connection.
type faultyConn struct {
	net.Conn
	read atomic.Int64
	cut  chan struct{} // closed when the test cuts
}

func (c *faultyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func TestTCPConnectionReset(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	const k, n = 2, 1 << 30 // never ends
	pr := startProducer(t, ts.parts, k, n, 16)
	var conns []*faultyConn
	var mu sync.Mutex
	cm := newManager(t, ClientConfig{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		fc := &faultyConn{Conn: nc}
		mu.Lock()
		conns = append(conns, fc)
		mu.Unlock()
		return fc, nil
	}})
	subs := []int{0, 1}
	rg := newRemoteGate(t, cm, ts.addr, pr.id, subs, 256)
	require.NoError(t, rg.gate.Start())
	// One deserializer per channel, as a task has: records may span
	// buffers of one channel.
	ds := []*Deserializer{NewDeserializer("reset[0]", 0), NewDeserializer("reset[1]", 0)}
	var got int
	var err error
	for err == nil {
		var b *buffer.Buffer
		var ch int
		ch, b, err = rg.gate.PollNext()
		if err != nil {
			break
		}
		if b == nil {
			<-rg.gate.Ready()
			continue
		}
		got++
		if got == 100 {
			// Reset mid-stream: an RST, as from a crashed peer.
			mu.Lock()
			conns[0].Conn.(*net.TCPConn).SetLinger(0)
			conns[0].Conn.Close()
			mu.Unlock()
		}
		if b.IsData() {
			d := ds[ch]
			d.SetBuffer(b)
			for {
				_, ok, derr := d.Next()
				require.NoError(t, derr)
				if !ok {
					break
				}
			}
		} else {
			b.Release()
		}
	}
	require.ErrorIs(t, err, ErrConnectionLost)
	require.Contains(t, err.Error(), ts.addr)
	for _, d := range ds {
		d.Close()
	}
	// The server released the readers: the producers drain and see their
	// subpartitions released; stop them.
	waitFor(t, func() bool { return ts.srv.NumConnections() == 0 })
	pr.stop()
	pr.wg.Wait()
	require.NoError(t, cm.Close())
	rg.closeAndCheck(t)
	require.Equal(t, 0, pr.g.InUse())
}

func TestTCPToken(t *testing.T) {
	ts := startServer(t, ServerConfig{Token: []byte("s3cret")})
	pr := startProducer(t, ts.parts, 1, 100, 8)

	bad := newManager(t, ClientConfig{Token: []byte("nope")})
	bg := newRemoteGate(t, bad, ts.addr, pr.id, []int{0}, 256)
	require.NoError(t, bg.gate.Start())
	err := bg.consume([]int{0}, 1, 100, 8)
	var re *RemoteError
	require.ErrorAs(t, err, &re)
	require.Equal(t, wire.ClassUnauthenticated, re.Class)
	require.NoError(t, bad.Close())
	bg.closeAndCheck(t)

	good := newManager(t, ClientConfig{Token: []byte("s3cret")})
	gg := newRemoteGate(t, good, ts.addr, pr.id, []int{0}, 256)
	require.NoError(t, gg.gate.Start())
	require.NoError(t, gg.consume([]int{0}, 1, 100, 8))
	require.NoError(t, good.Close())
	gg.closeAndCheck(t)
}

// selfSigned returns a certificate for 127.0.0.1 signed by itself.
func selfSigned(t testing.TB, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}

func TestTCPTLS(t *testing.T) {
	srvCert, srvPool := selfSigned(t, "server")
	cliCert, cliPool := selfSigned(t, "client")
	for _, mutual := range []bool{false, true} {
		t.Run(fmt.Sprintf("mutual=%v", mutual), func(t *testing.T) {
			scfg := &tls.Config{Certificates: []tls.Certificate{srvCert}, MinVersion: tls.VersionTLS13}
			if mutual {
				scfg.ClientAuth = tls.RequireAndVerifyClientCert
				scfg.ClientCAs = cliPool
			}
			ts := startServer(t, ServerConfig{TLS: scfg})
			pr := startProducer(t, ts.parts, 2, 5000, 8)
			ccfg := &tls.Config{RootCAs: srvPool, MinVersion: tls.VersionTLS13}
			if mutual {
				// Without a client certificate the server refuses.
				nocert := newManager(t, ClientConfig{TLS: ccfg})
				ng := newRemoteGate(t, nocert, ts.addr, pr.id, []int{0, 1}, 256)
				require.NoError(t, ng.gate.Start())
				require.Error(t, ng.consume([]int{0, 1}, 2, 5000, 8))
				require.NoError(t, nocert.Close())
				ng.closeAndCheck(t)
				ccfg = ccfg.Clone()
				ccfg.Certificates = []tls.Certificate{cliCert}
			}
			cm := newManager(t, ClientConfig{TLS: ccfg})
			rg := newRemoteGate(t, cm, ts.addr, pr.id, []int{0, 1}, 256)
			require.NoError(t, rg.gate.Start())
			require.NoError(t, rg.consume([]int{0, 1}, 2, 5000, 8))
			require.NoError(t, cm.Close())
			rg.closeAndCheck(t)
		})
	}
}

// TestTCPPartitionNotFoundRetry: a channel started before its producer
// is deployed retries until the partition appears; one whose partition
// never appears fails after the last backoff.
func TestTCPPartitionNotFoundRetry(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	cm := newManager(t, ClientConfig{RetryInitialBackoff: time.Millisecond, RetryMaxBackoff: 8 * time.Millisecond})

	missing := newRemoteGate(t, cm, ts.addr, uuid.New(), []int{0}, 256)
	require.NoError(t, missing.gate.Start())
	err := missing.consume([]int{0}, 1, 1, 8)
	var re *RemoteError
	require.ErrorAs(t, err, &re)
	require.Equal(t, wire.ClassPartitionNotFound, re.Class)
	require.Contains(t, err.Error(), "still not found")
	missing.gate.Close()

	// Register the producer only once the consumer's first request was
	// refused.
	pm := ts.parts
	id := uuid.New()
	late := newRemoteGate(t, cm, ts.addr, id, []int{0}, 256)
	require.NoError(t, late.gate.Start())
	waitFor(t, func() bool { return late.chans[0].backoffStarted() })
	g, p := newTestPartition(t, 1)
	require.NoError(t, pm.RegisterSubpartitions(id, []*Subpartition{p.Subpartition(0)}))
	writeBuffer(t, p, 0, 0)
	p.Finish(eop)
	require.NoError(t, late.consume([]int{0}, 1, 1, 8))
	require.NoError(t, cm.Close())
	missing.closeAndCheck(t)
	late.closeAndCheck(t)
	p.ReleaseProducer()
	require.Equal(t, 0, g.InUse())
}

// TestTCPProducerFailed: class 4 fails only the channels of the failed
// partition; another partition's channel on the same connection goes on.
func TestTCPProducerFailed(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	failing := startProducer(t, ts.parts, 1, 1<<30, 8)
	fine := startProducer(t, ts.parts, 1, 3000, 8)
	cm := newManager(t, ClientConfig{})
	fg := newRemoteGate(t, cm, ts.addr, failing.id, []int{0}, 256)
	og := newRemoteGate(t, cm, ts.addr, fine.id, []int{0}, 256)
	require.NoError(t, fg.gate.Start())
	require.NoError(t, og.gate.Start())
	// Read a little from the failing one, then fail its producer.
	for got := 0; got < 3; {
		_, b, err := fg.gate.PollNext()
		require.NoError(t, err)
		if b == nil {
			<-fg.gate.Ready()
			continue
		}
		b.Release()
		got++
	}
	require.NoError(t, ts.parts.Fail(failing.id, errors.New("boom")))
	var err error
	for err == nil {
		var b *buffer.Buffer
		_, b, err = fg.gate.PollNext()
		if b != nil {
			b.Release()
		} else if err == nil {
			<-fg.gate.Ready()
		}
	}
	var re *RemoteError
	require.ErrorAs(t, err, &re)
	require.Equal(t, wire.ClassProducerFailed, re.Class)
	require.Contains(t, re.Message, "boom")
	require.NoError(t, og.consume([]int{0}, 1, 3000, 8))
	failing.stop()
	require.NoError(t, cm.Close())
	fg.closeAndCheck(t)
	og.closeAndCheck(t)
}

// TestTCPAlignedBarrier: the client resumes consumption after an aligned
// barrier only when the gate resumes the channel.
func TestTCPAlignedBarrier(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	g, p := newTestPartition(t, 1)
	require.NoError(t, ts.parts.Register(p))
	cm := newManager(t, ClientConfig{})
	rg := newRemoteGate(t, cm, ts.addr, p.ID(), []int{0}, 256)
	require.NoError(t, rg.gate.Start())
	writeBuffer(t, p, 0, 1)
	p.BroadcastEvent(barrierPayload(7), buffer.AlignedBarrier)
	writeBuffer(t, p, 0, 2)
	p.Finish(eop)
	next := func() *buffer.Buffer {
		for {
			_, b, err := rg.gate.PollNext()
			require.NoError(t, err)
			if b != nil {
				return b
			}
			<-rg.gate.Ready()
		}
	}
	b := next()
	require.True(t, b.IsData())
	b.Release()
	b = next()
	require.Equal(t, buffer.AlignedBarrier, b.Type())
	b.Release()
	// Nothing more until resumed: the server holds buffer 2 back.
	require.Equal(t, 1, p.Subpartition(0).Backlog(), "data buffer 2 still queued at the producer")
	rg.gate.Resume(0)
	b = next()
	require.True(t, b.IsData())
	b.Release()
	b = next()
	require.Equal(t, eop, b.Bytes())
	b.Release()
	require.NoError(t, cm.Close())
	rg.closeAndCheck(t)
	p.ReleaseProducer()
	require.Equal(t, 0, g.InUse())
}

func (ch *RemoteChannel) backoffStarted() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.mu.backoff > 0
}

// fakeServer is a hand-written server for one connection, to feed the
// client what weir's server never sends (partial buffers, gaps, bad
// frames).
type fakeServer struct {
	t    testing.TB
	ln   net.Listener
	nc   net.Conn
	rd   *wire.Reader
	reqs map[uint32]wire.PartitionRequest // by subpartition
}

func newFakeServer(t testing.TB) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return &fakeServer{t: t, ln: ln, reqs: map[uint32]wire.PartitionRequest{}}
}

func (s *fakeServer) accept() {
	nc, err := s.ln.Accept()
	require.NoError(s.t, err)
	s.t.Cleanup(func() { nc.Close() })
	s.nc = nc
	s.rd, err = wire.NewReader(nc, wire.ServerBound, wire.ReaderConfig{})
	require.NoError(s.t, err)
	f := s.next()
	require.Equal(s.t, wire.TypeHello, f.Type)
	s.send(wire.AppendHelloAck(nil, wire.HelloAck{Version: 1}))
}

func (s *fakeServer) next() *wire.Frame {
	s.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	f, err := s.rd.ReadFrame()
	require.NoError(s.t, err)
	if f.Type == wire.TypePartitionRequest {
		s.reqs[f.PartitionRequest.Subpartition] = f.PartitionRequest
	}
	return f
}

func (s *fakeServer) send(b []byte) {
	_, err := s.nc.Write(b)
	require.NoError(s.t, err)
}

func dataPayload(vals ...uint64) []byte {
	var p []byte
	for _, v := range vals {
		p = binary.BigEndian.AppendUint32(p, 8)
		p = binary.BigEndian.AppendUint64(p, v)
	}
	return p
}

func pollOne(t testing.TB, g *InputGate) (int, *buffer.Buffer, error) {
	for {
		c, b, err := g.PollNext()
		if b != nil || err != nil {
			return c, b, err
		}
		<-g.Ready()
	}
}

// TestTCPClientPartialsAndFaults: partial buffers are sliced without
// copying and their credit comes back coalesced; a sequence gap fails only
// its channel; an oversized payload is a protocol error that fails every
// channel of the connection.
func TestTCPClientPartialsAndFaults(t *testing.T) {
	fs := newFakeServer(t)
	cm := newManager(t, ClientConfig{})
	part := uuid.New()
	rg := newRemoteGate(t, cm, fs.ln.Addr().String(), part, []int{0, 1}, 256)
	started := make(chan error, 1)
	go func() { started <- rg.gate.Start() }()
	fs.accept()
	fs.next()
	fs.next()
	require.NoError(t, <-started)
	r0, r1 := fs.reqs[0], fs.reqs[1]
	require.Equal(t, uint32(2), r0.InitialCredit)
	require.Equal(t, part, r0.Partition)

	// Two data buffers in one frame, on channel 0.
	a, b := dataPayload(1, 2), dataPayload(3)
	fs.send(wire.AppendBufferResponse(nil, wire.BufferResponseHeader{Receiver: r0.Receiver, Sequence: 0,
		Partials: []uint32{uint32(len(a)), uint32(len(b))}, Size: uint32(len(a) + len(b))}, append(a, b...)))
	_, s1, err := pollOne(t, rg.gate)
	require.NoError(t, err)
	_, s2, err := pollOne(t, rg.gate)
	require.NoError(t, err)
	require.Equal(t, a, s1.Bytes())
	require.Equal(t, b, s2.Bytes())
	// Zero copy: the second slice starts right after the first in memory.
	require.Same(t, &s1.Bytes()[:len(a)+1][len(a)], &s2.Bytes()[0])
	s1.Release()
	s2.Release()
	// Both credits come back, as one ADD_CREDIT or two; no more than 2.
	credits := 0
	for credits < 2 {
		f := fs.next()
		require.Equal(t, wire.TypeAddCredit, f.Type)
		require.Equal(t, r0.Receiver, f.AddCredit.Receiver)
		credits += int(f.AddCredit.Credit)
	}
	require.Equal(t, 2, credits)

	// A gap on channel 1 fails channel 1 (and cancels it); channel 0 lives.
	fs.send(wire.AppendBufferResponse(nil, wire.BufferResponseHeader{Receiver: r1.Receiver, Sequence: 1,
		Size: uint32(len(a))}, a))
	c, _, err := pollOne(t, rg.gate)
	require.Equal(t, 1, c)
	var se *credit.SequenceError
	require.ErrorAs(t, err, &se)
	f := fs.next()
	require.Equal(t, wire.TypeCancelPartition, f.Type)
	require.Equal(t, r1.Receiver, f.CancelPartition.Receiver)
	fs.send(wire.AppendBufferResponse(nil, wire.BufferResponseHeader{Receiver: r0.Receiver, Sequence: 2,
		Size: uint32(len(b))}, b))
	_, s3, err := pollOne(t, rg.gate)
	require.NoError(t, err)
	require.Equal(t, b, s3.Bytes())
	s3.Release()

	// A payload larger than the receive buffers: protocol error, the
	// connection closes and channel 0 fails too.
	big := make([]byte, 300)
	fs.send(wire.AppendBufferResponse(nil, wire.BufferResponseHeader{Receiver: r0.Receiver, Sequence: 3,
		Size: uint32(len(big))}, big))
	_, _, err = pollOne(t, rg.gate)
	require.ErrorIs(t, err, ErrConnectionLost)
	var pe *wire.ProtocolError
	require.ErrorAs(t, err, &pe)
	require.NoError(t, cm.Close())
	rg.closeAndCheck(t)
}

// TestTCPClientFatalError: a fatal ERROR_RESPONSE fails every channel of
// the connection; a channel to another server is unaffected.
func TestTCPClientFatalError(t *testing.T) {
	fs := newFakeServer(t)
	ts := startServer(t, ServerConfig{})
	pr := startProducer(t, ts.parts, 1, 2000, 8)
	cm := newManager(t, ClientConfig{})
	bad := newRemoteGate(t, cm, fs.ln.Addr().String(), uuid.New(), []int{0, 1}, 256)
	good := newRemoteGate(t, cm, ts.addr, pr.id, []int{0}, 256)
	started := make(chan error, 1)
	go func() { started <- bad.gate.Start() }()
	fs.accept()
	fs.next()
	fs.next()
	require.NoError(t, <-started)
	require.NoError(t, good.gate.Start())
	fs.send(wire.AppendErrorResponse(nil, wire.ErrorResponse{Class: wire.ClassGeneric, Message: "going down"}))
	for range 2 {
		_, _, err := pollOne(t, bad.gate)
		var re *RemoteError
		require.ErrorAs(t, err, &re)
		require.True(t, re.Fatal)
		require.Contains(t, err.Error(), "going down")
	}
	require.NoError(t, good.consume([]int{0}, 1, 2000, 8))
	require.NoError(t, cm.Close())
	bad.closeAndCheck(t)
	good.closeAndCheck(t)
}
