package nats

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/eventtime"
)

// Guarantee is a sink's delivery guarantee.
type Guarantee uint8

const (
	// AtLeastOnce publishes every record at once (asynchronously) and
	// waits for the stream's acknowledgements at every checkpoint (the
	// default): after a failure, the records published since the restored
	// checkpoint are published again.
	AtLeastOnce Guarantee = iota
	// ExactlyOnce keeps each checkpoint's records in the checkpoint and
	// publishes them once it completes, each with a message ID the stream
	// de-duplicates (see the package doc for the limit of the stream's
	// duplicate window). It needs checkpointing and a MsgIDPrefix.
	ExactlyOnce
)

func (g Guarantee) String() string {
	switch g {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	}
	return fmt.Sprintf("Guarantee(%d)", uint8(g))
}

// SinkConfig configures Sink. Zero values mean the documented defaults.
type SinkConfig[T any] struct {
	// URL is the server URL, or a comma-separated list of them (required).
	URL string
	// Subject receives every record, unless SubjectSelector picks one per
	// value. One of them is required; a stream must capture the subjects.
	Subject         string
	SubjectSelector func(v T) string
	// Stream is the stream the records go to; it is checked before the
	// job runs (default: the stream that captures Subject).
	Stream string
	// Value serializes a value into the message data (required).
	Value func(v T) ([]byte, error)
	// Guarantee is the delivery guarantee (default AtLeastOnce).
	Guarantee Guarantee
	// MsgIDPrefix names the sink's messages (exactly-once, required there):
	// Nats-Msg-Id prefix-subtask-checkpoint-index. It must be unique to this
	// sink among all the jobs writing to the stream, and stay the same
	// across the job's restarts and restores.
	MsgIDPrefix string
	// TimestampHeader, if set, names a header that receives each record's
	// event time in unix milliseconds (Source's TimestampHeader reads it).
	TimestampHeader string
	// MaxPending is the most publications awaiting their acknowledgement
	// (default 4096): a slower stream slows the job.
	MaxPending int
	// MaxTransactionBytes bounds the records an exactly-once subtask keeps
	// between two checkpoints (default 64 MiB); more fails the job, saying
	// to checkpoint more often.
	MaxTransactionBytes int
	// RequestTimeout bounds the wait for acknowledgements at a checkpoint
	// or commit, and the lookups before the job runs (default 1 min).
	RequestTimeout time.Duration
	// Options are passed to nats.Connect last (credentials, TLS).
	Options []natsgo.Option
	// Logger (default: the job's).
	Logger *zap.Logger
}

// restartMargin is what the duplicate window should leave beyond the
// checkpoint interval, for a failed job to restart and publish again the
// records of its last checkpoint: below it Sink warns.
const restartMargin = time.Minute

// Validate reports the first invalid setting.
func (c *SinkConfig[T]) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("nats: sink: no URL")
	case (c.Subject == "") == (c.SubjectSelector == nil):
		return errors.New("nats: sink: set exactly one of Subject and SubjectSelector")
	case c.Subject != "" && (!validSubject(c.Subject) || subjectHasWildcard(c.Subject)):
		return fmt.Errorf("nats: sink: subject %q is not a valid subject to publish to", c.Subject)
	case c.Stream != "" && !validName(c.Stream):
		return fmt.Errorf("nats: sink: stream name %q: no spaces, dots, * or >", c.Stream)
	case c.Value == nil:
		return errors.New("nats: sink: no value serializer")
	case c.Guarantee > ExactlyOnce:
		return fmt.Errorf("nats: sink: unknown guarantee %d", c.Guarantee)
	case c.Guarantee == ExactlyOnce && c.MsgIDPrefix == "":
		return errors.New("nats: sink: exactly-once needs a MsgIDPrefix, unique to this sink")
	case c.MaxPending < 0 || c.MaxTransactionBytes < 0 || c.RequestTimeout < 0:
		return errors.New("nats: sink: negative MaxPending, MaxTransactionBytes or RequestTimeout")
	}
	return nil
}

func subjectHasWildcard(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '*' || s[i] == '>' {
			return true
		}
	}
	return false
}

// Sink writes s to JetStream with the configured guarantee. Bad
// configuration is reported by Execute, and so is, before any record is
// read, a server that cannot be reached, no stream for the subject, and
// (exactly-once) a duplicate window that does not exceed the checkpoint
// interval.
func Sink[T any](s *weir.Stream[T], cfg SinkConfig[T]) *weir.Sink {
	env := s.Environment()
	if cfg.Logger == nil {
		cfg.Logger = env.Logger()
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 4096
	}
	if cfg.MaxTransactionBytes == 0 {
		cfg.MaxTransactionBytes = 64 << 20
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = time.Minute
	}
	err := cfg.Validate()
	ck, on := env.Checkpointing()
	if err == nil && cfg.Guarantee == ExactlyOnce && !on {
		err = errors.New("nats: sink: exactly-once needs checkpointing (weir.WithCheckpointing)")
	}
	env.ReportError(err)
	name := "nats sink " + cfg.Subject + cfg.Stream
	window := new(atomic.Int64)
	if err == nil {
		env.CheckBeforeRun(func(ctx context.Context) error {
			w, err := checkSink(ctx, &cfg, ck.Interval)
			window.Store(int64(w))
			return err
		})
	}
	return weir.TwoPhaseCommitSink(s, txnCodec{}, func(sub, par int) (weir.TwoPhaseCommitter[T, *txn], error) {
		return &committer[T]{cfg: &cfg, sub: sub, window: window,
			log:  cfg.Logger.With(zap.String("sink", name), zap.Int("subtask", sub)),
			opts: []jetstream.PublishOpt{jetstream.WithStallWait(stallWait)}}, nil
	}).Name(name)
}

// checkSink checks that a stream takes the records and returns its
// duplicate window.
func checkSink[T any](ctx context.Context, cfg *SinkConfig[T], interval time.Duration) (time.Duration, error) {
	what := "nats: sink " + cfg.Subject + cfg.Stream
	nc, err := connect(cfg.URL, "weir nats sink check", cfg.RequestTimeout, cfg.Options, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	stream := cfg.Stream
	if stream == "" {
		if cfg.Subject == "" {
			return 0, nil // nothing to check by
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		if stream, err = js.StreamNameBySubject(ctx, cfg.Subject); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return 0, fmt.Errorf("%s: no stream at %s captures subject %q", what, nc.ConnectedUrlRedacted(), cfg.Subject)
			}
			return 0, fmt.Errorf("%s: looking up the stream of %q: %w", what, cfg.Subject, err)
		}
	}
	info, err := streamInfo(ctx, nc, stream)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if cfg.Subject != "" && !coveredBy(cfg.Subject, info.Config.Subjects) {
		return 0, fmt.Errorf("%s: stream %s does not capture subject %q (its subjects: %v)", what, stream, cfg.Subject, info.Config.Subjects)
	}
	w := info.Config.Duplicates
	if cfg.Guarantee == ExactlyOnce {
		switch {
		case w <= interval:
			return w, fmt.Errorf("%s: the duplicate window %v of stream %s must exceed the checkpoint interval %v for exactly-once (raise the stream's Duplicates)", what, w, stream, interval)
		case w < interval+restartMargin:
			cfg.Logger.Warn("the stream's duplicate window leaves little time beyond the checkpoint interval: records of a checkpoint published again after a slow restart are written twice",
				zap.String("stream", stream), zap.Duration("duplicates", w), zap.Duration("checkpointInterval", interval),
				zap.Duration("recommendedAtLeast", interval+restartMargin))
		}
	}
	return w, nil
}

// stallWait is how long one publication waits for room among the pending
// ones before the sink checks its context and deadline again.
const stallWait = 50 * time.Millisecond

// txn is a sink transaction. At-least-once: empty. Exactly-once: the
// records of one checkpoint (subject, timestamp, data each), kept in the
// checkpoint and published when it completes.
type txn struct {
	Name     string // prefix-subtask-checkpoint
	N        int    // records
	Buf      []byte // records: subject (2-byte length, bytes; empty: Subject), timestamp (8), data (4-byte length, bytes)
	Prepared int64  // unix ms of the pre-commit, 0 before

	committed bool // here: published and acknowledged
}

// txnCodec encodes a *txn: name (2-byte length, bytes), records (4),
// prepared (8), buffer (4-byte length, bytes).
type txnCodec struct{}

func (txnCodec) Append(dst []byte, t *txn) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.Name)))
	dst = append(dst, t.Name...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(t.N))
	dst = binary.BigEndian.AppendUint64(dst, uint64(t.Prepared))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(t.Buf)))
	return append(dst, t.Buf...)
}

var errCorruptTxn = errors.New("nats: corrupt sink transaction")

func (txnCodec) Decode(src []byte) (*txn, error) {
	if len(src) < 2 {
		return nil, errCorruptTxn
	}
	l := int(binary.BigEndian.Uint16(src))
	if len(src) < 2+l+16 {
		return nil, errCorruptTxn
	}
	t := &txn{Name: string(src[2 : 2+l])}
	src = src[2+l:]
	t.N = int(binary.BigEndian.Uint32(src))
	t.Prepared = int64(binary.BigEndian.Uint64(src[4:]))
	if n := int(binary.BigEndian.Uint32(src[12:])); len(src) != 16+n {
		return nil, errCorruptTxn
	}
	t.Buf = append([]byte(nil), src[16:]...)
	// Check the records parse, so that a commit never reads past them.
	n := 0
	if err := t.each(func(string, int64, []byte) error { n++; return nil }); err != nil || n != t.N {
		return nil, errCorruptTxn
	}
	return t, nil
}

// each calls fn with every record of t.
func (t *txn) each(fn func(subject string, ts int64, data []byte) error) error {
	b := t.Buf
	for len(b) > 0 {
		if len(b) < 2 {
			return errCorruptTxn
		}
		l := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+l+12 {
			return errCorruptTxn
		}
		subj := string(b[2 : 2+l])
		ts := int64(binary.BigEndian.Uint64(b[2+l:]))
		d := int(binary.BigEndian.Uint32(b[10+l:]))
		b = b[14+l:]
		if len(b) < d {
			return errCorruptTxn
		}
		if err := fn(subj, ts, b[:d:d]); err != nil {
			return err
		}
		b = b[d:]
	}
	return nil
}

// committer is one sink subtask's TwoPhaseCommitter, with one connection.
type committer[T any] struct {
	cfg    *SinkConfig[T]
	sub    int
	log    *zap.Logger
	window *atomic.Int64 // the stream's duplicate window, from the check
	opts   []jetstream.PublishOpt

	nc     *natsgo.Conn
	js     jetstream.JetStream
	lost   chan struct{}   // closed once nc's connection is lost
	ctx    context.Context // the task's (SetContext); nil: none
	closed bool
	empty  txn // at-least-once's transaction

	failed     atomic.Bool // an acknowledgement failed
	duplicates atomic.Int64
	mu         struct {
		sync.Mutex
		err error // the first failed acknowledgement
	}
}

var (
	_ weir.TwoPhaseCommitter[int, *txn] = (*committer[int])(nil)
	_ weir.CheckpointBeginner[*txn]     = (*committer[int])(nil)
	_ weir.ContextSetter                = (*committer[int])(nil)
	_ weir.TimestampWriter[int, *txn]   = (*committer[int])(nil)
)

// SetContext implements weir.ContextSetter.
func (c *committer[T]) SetContext(ctx context.Context) { c.ctx = ctx }

// requestCtx bounds one wait by RequestTimeout and, until Close, by the
// task's context.
func (c *committer[T]) requestCtx() (context.Context, context.CancelFunc) {
	parent := c.ctx
	if parent == nil || c.closed {
		parent = context.Background()
	}
	return context.WithTimeout(parent, c.cfg.RequestTimeout)
}

func (c *committer[T]) conn() error {
	if c.js != nil {
		return nil
	}
	lost := make(chan struct{})
	var once sync.Once
	nc, err := connect(c.cfg.URL, fmt.Sprintf("weir nats sink %s %d", c.cfg.Subject+c.cfg.Stream, c.sub), c.cfg.RequestTimeout, c.cfg.Options,
		func(err error) {
			c.fail(fmt.Errorf("nats: sink: %w", err))
			once.Do(func() { close(lost) })
		})
	if err != nil {
		return fmt.Errorf("nats: sink: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(c.cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(c.cfg.RequestTimeout),
		jetstream.WithPublishAsyncErrHandler(c.onError), jetstream.WithPublishAsyncAckHandler(c.onAck))
	if err != nil {
		nc.Close()
		return fmt.Errorf("nats: sink: %w", err)
	}
	c.nc, c.js, c.lost = nc, js, lost
	return nil
}

func (c *committer[T]) onError(_ jetstream.JetStream, m *natsgo.Msg, err error) {
	c.fail(fmt.Errorf("nats: sink: publishing to %s: %w", m.Subject, err))
}

// fail records the sink's first failure, which the next write, wait or
// commit returns.
func (c *committer[T]) fail(err error) {
	c.mu.Lock()
	if c.mu.err == nil {
		c.mu.err = err
	}
	c.mu.Unlock()
	c.failed.Store(true)
}

func (c *committer[T]) onAck(_ jetstream.JetStream, m *natsgo.Msg, a *jetstream.PubAck) {
	if a.Duplicate {
		c.duplicates.Add(1)
	}
	c.recycle(m)
}

// An exactly-once commit publishes each record with a header; its
// messages are recycled once acknowledged (nats.go drops them after the
// acknowledgement handler), so that a message, its header map and the
// header's value slice are allocated once, not once per record.
var idMsgs sync.Pool

// idMsg returns a message with a Nats-Msg-Id header of id.
func idMsg(subject string, data []byte, id string) *natsgo.Msg {
	m, _ := idMsgs.Get().(*natsgo.Msg)
	if m == nil {
		m = &natsgo.Msg{Header: natsgo.Header{jetstream.MsgIDHeader: make([]string, 1)}}
	}
	m.Subject, m.Data = subject, data
	m.Header[jetstream.MsgIDHeader][0] = id
	return m
}

// recycle puts back a message of idMsg (one with exactly one header: a
// timestamp header makes two, and such messages are left alone).
func (c *committer[T]) recycle(m *natsgo.Msg) {
	if len(m.Header) != 1 {
		return
	}
	v := m.Header[jetstream.MsgIDHeader]
	if len(v) != 1 {
		return
	}
	v[0] = ""
	*m = natsgo.Msg{Header: m.Header}
	idMsgs.Put(m)
}

func (c *committer[T]) ackErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

func (c *committer[T]) Begin() (*txn, error) { return c.BeginAfter(0) }

// BeginAfter starts transaction prefix-subtask-(last+1) (exactly-once).
func (c *committer[T]) BeginAfter(last barrier.CheckpointID) (*txn, error) {
	if err := c.conn(); err != nil {
		return nil, err
	}
	if c.cfg.Guarantee != ExactlyOnce {
		return &c.empty, nil
	}
	return &txn{Name: c.cfg.MsgIDPrefix + "-" + strconv.Itoa(c.sub) + "-" + strconv.FormatUint(uint64(last)+1, 10)}, nil
}

func (c *committer[T]) Write(t *txn, v T) error {
	return c.WriteTimestamped(t, v, eventtime.NoTimestamp)
}

// WriteTimestamped implements weir.TimestampWriter: the timestamp goes
// into TimestampHeader, if set.
func (c *committer[T]) WriteTimestamped(t *txn, v T, ts int64) error {
	if c.failed.Load() {
		return c.ackErr()
	}
	subject := c.cfg.Subject
	if c.cfg.SubjectSelector != nil {
		subject = c.cfg.SubjectSelector(v)
		if subject == "" {
			return errors.New("nats: sink: the subject selector returned no subject")
		}
	}
	data, err := c.cfg.Value(v)
	if err != nil {
		return fmt.Errorf("nats: sink: serializing a value: %w", err)
	}
	if c.cfg.Guarantee == AtLeastOnce {
		return c.publish(subject, data, "", ts)
	}
	if c.cfg.SubjectSelector == nil {
		subject = ""
	}
	if len(subject) > 0xffff {
		return fmt.Errorf("nats: sink: subject of %d bytes", len(subject))
	}
	if len(t.Buf)+len(data)+len(subject)+14 > c.cfg.MaxTransactionBytes {
		return fmt.Errorf("nats: sink: the records since the last checkpoint exceed MaxTransactionBytes (%d): checkpoint more often or raise it", c.cfg.MaxTransactionBytes)
	}
	t.Buf = binary.BigEndian.AppendUint16(t.Buf, uint16(len(subject)))
	t.Buf = append(t.Buf, subject...)
	t.Buf = binary.BigEndian.AppendUint64(t.Buf, uint64(ts))
	t.Buf = binary.BigEndian.AppendUint32(t.Buf, uint32(len(data)))
	t.Buf = append(t.Buf, data...)
	t.N++
	return nil
}

// publish publishes one message asynchronously, waiting (cancellably,
// up to RequestTimeout) while MaxPending publications are unacknowledged.
func (c *committer[T]) publish(subject string, data []byte, id string, ts int64) error {
	stamped := c.cfg.TimestampHeader != "" && ts != eventtime.NoTimestamp
	var m *natsgo.Msg
	switch {
	case id != "" && !stamped: // exactly-once's usual message
		m = idMsg(subject, data, id)
	case id != "" || stamped:
		m = &natsgo.Msg{Subject: subject, Data: data, Header: natsgo.Header{}}
		if id != "" {
			m.Header[jetstream.MsgIDHeader] = []string{id}
		}
		if stamped {
			m.Header[c.cfg.TimestampHeader] = []string{strconv.FormatInt(ts, 10)}
		}
	default:
		m = &natsgo.Msg{Subject: subject, Data: data}
	}
	_, err := c.js.PublishMsgAsync(m, c.opts...)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
		return fmt.Errorf("nats: sink: publishing to %s: %w", subject, err)
	}
	ctx, cancel := c.requestCtx()
	defer cancel()
	for errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
		if c.failed.Load() {
			return c.ackErr()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("nats: sink: publishing to %s: %d publications still unacknowledged: %w", subject, c.js.PublishAsyncPending(), context.Cause(ctx))
		}
		_, err = c.js.PublishMsgAsync(m, c.opts...)
	}
	if err != nil {
		return fmt.Errorf("nats: sink: publishing to %s: %w", subject, err)
	}
	return nil
}

// waitAcks waits until every publication is acknowledged, and returns
// the first that failed.
func (c *committer[T]) waitAcks(what string) error {
	ctx, cancel := c.requestCtx()
	defer cancel()
	select {
	case <-c.js.PublishAsyncComplete():
	case <-c.lost:
	case <-ctx.Done():
		return fmt.Errorf("nats: sink: %s: %d publications unacknowledged: %w", what, c.js.PublishAsyncPending(), context.Cause(ctx))
	}
	return c.ackErr()
}

// PreCommit waits for the acknowledgements (at-least-once), or stamps
// the transaction (exactly-once: its records go into the checkpoint).
func (c *committer[T]) PreCommit(t *txn) error {
	if c.cfg.Guarantee == AtLeastOnce {
		return c.waitAcks("checkpoint")
	}
	t.Prepared = time.Now().UnixMilli()
	return nil
}

// Commit publishes the records of t with their message IDs and waits for
// their acknowledgements. Publishing t again is harmless within the
// stream's duplicate window: the stream drops the messages it has.
func (c *committer[T]) Commit(t *txn) error {
	if c.cfg.Guarantee != ExactlyOnce || t.committed || t.N == 0 {
		return nil
	}
	if err := c.conn(); err != nil {
		return err
	}
	if c.closed {
		defer c.Close() // a commit at the end of the job
	}
	if w := time.Duration(c.window.Load()); w > 0 && t.Prepared > 0 {
		if age := time.Since(time.UnixMilli(t.Prepared)); age >= w {
			c.log.Warn("publishing the records of a checkpoint older than the stream's duplicate window: those published before are written twice",
				zap.String("transaction", t.Name), zap.Duration("age", age), zap.Duration("duplicates", w))
		}
	}
	dup := c.duplicates.Load()
	ids := msgIDs{prefix: t.Name}
	err := t.each(func(subject string, ts int64, data []byte) error {
		if subject == "" {
			subject = c.cfg.Subject
		}
		return c.publish(subject, data, ids.next(), ts)
	})
	if err == nil {
		err = c.waitAcks("committing " + t.Name)
	}
	if err != nil {
		return err
	}
	if d := c.duplicates.Load() - dup; d > 0 {
		c.log.Info("the stream dropped records published before (a commit repeated after a restore)",
			zap.String("transaction", t.Name), zap.Int64("duplicates", d), zap.Int("records", t.N))
	}
	t.committed, t.Buf = true, nil
	return nil
}

// msgIDs numbers the messages of a transaction: prefix-0, prefix-1, …,
// made idsPerString at a time into one string.
type msgIDs struct {
	prefix string
	n      int    // the next number
	s      string // ids, ends[k-1]:ends[k] the k-th
	ends   []int
	k      int
	buf    []byte
}

const idsPerString = 256

func (m *msgIDs) next() string {
	if m.k == len(m.ends) {
		m.buf, m.ends, m.k = m.buf[:0], m.ends[:0], 0
		for range idsPerString {
			m.buf = strconv.AppendInt(append(append(m.buf, m.prefix...), '-'), int64(m.n), 10)
			m.n++
			m.ends = append(m.ends, len(m.buf))
		}
		m.s = string(m.buf)
	}
	start := 0
	if m.k > 0 {
		start = m.ends[m.k-1]
	}
	m.k++
	return m.s[start:m.ends[m.k-1]]
}

// Abort drops t's records: the job replays them.
func (c *committer[T]) Abort(t *txn) error {
	if c.cfg.Guarantee == ExactlyOnce && !t.committed {
		t.Buf, t.N = nil, 0
	}
	return nil
}

// Close closes the connection: publications not acknowledged by now are
// the restored checkpoint's to repeat.
func (c *committer[T]) Close() error {
	c.closed = true
	if c.nc != nil {
		c.nc.Close()
		c.nc, c.js = nil, nil
	}
	return nil
}
