package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/eventtime"
)

// StartPosition says where the source starts reading a split it has no
// checkpointed position for, at the job's first start. Splits that
// appear later (added to SourceConfig.Subjects before a restore) are read
// from the start of the stream.
type StartPosition struct {
	kind startKind
	seq  uint64
}

type startKind uint8

const (
	earliest startKind = iota
	latest
	atSequence
)

// Earliest starts at the first message still in the stream (the default).
func Earliest() StartPosition { return StartPosition{kind: earliest} }

// Latest starts after the last message the stream held when the job
// started.
func Latest() StartPosition { return StartPosition{kind: latest} }

// AtSequence starts at stream sequence seq (at the first message after
// it, if seq is gone).
func AtSequence(seq uint64) StartPosition { return StartPosition{kind: atSequence, seq: max(seq, 1)} }

// SourceConfig configures Source. Zero values mean the documented
// defaults.
type SourceConfig[T any] struct {
	// URL is the server URL, or a comma-separated list of them, as
	// nats.Connect takes it: "nats://host:4222" (required).
	URL string
	// Stream is the JetStream stream read (required).
	Stream string
	// Subjects are the source's splits: subject filters of the stream
	// (wildcards allowed, no two overlapping), each read by one subtask
	// and checkpointed with its own position, so that the source can run
	// at any parallelism and be rescaled (see PartitionSubjects). Empty:
	// the whole stream is one split, read by subtask 0.
	Subjects []string
	// Consumer names the source's consumers, one per subtask:
	// Consumer-<subtask> (required). It must be unique to this source among
	// the jobs reading the stream: a subtask deletes the consumers of its
	// name that failed or rescaled attempts left.
	Consumer string
	// Deserializer turns a message into a value (required). See Values.
	Deserializer func(m jetstream.Msg) (T, error)
	// SkipBadRecords makes the source skip a message the deserializer
	// rejects, log it and count it in Skipped (if set). By default such a
	// message fails the job, naming its stream sequence.
	SkipBadRecords bool
	Skipped        *atomic.Int64
	// Start is where splits without a checkpointed position start
	// (default Earliest).
	Start StartPosition
	// Bounded makes the source stop, per split, at the last message the
	// stream held for it when the job first started (kept in the
	// checkpoints too), so the job ends.
	Bounded bool
	// TimestampHeader names a header holding each message's event time in
	// unix milliseconds (Sink's TimestampHeader writes it). Default: the
	// time the stream stored the message. The Watermarks' timestamp
	// function, if set, overrides both.
	TimestampHeader string
	// Watermarks is the event-time strategy, applied per split; its
	// timestamp function may be nil to use the message timestamps (e.g.
	// weir.BoundedOutOfOrderness[T](bound, nil).WithIdleness(d)). Default:
	// message timestamps, no watermarks.
	Watermarks *weir.WatermarkStrategy[T]
	// FetchBatch is how many messages one pull asks for (default 1024); a
	// subtask buffers at most twice that many.
	FetchBatch int
	// AckWait is the consumers' ack wait (default 10 min): messages are
	// acknowledged once the checkpoint that covers them completes, so it
	// should exceed the checkpoint interval, or the server redelivers
	// messages (which the source skips) meanwhile.
	AckWait time.Duration
	// RequestTimeout bounds the connection and the lookups at start, so
	// that an unreachable server fails the job instead of hanging it
	// (default 10 s).
	RequestTimeout time.Duration
	// Options are passed to nats.Connect last (credentials, TLS).
	Options []natsgo.Option
	// Logger (default: the job's).
	Logger *zap.Logger
}

// Values returns a Deserializer that decodes message data with fn.
func Values[T any](fn func(data []byte) (T, error)) func(jetstream.Msg) (T, error) {
	return func(m jetstream.Msg) (T, error) { return fn(m.Data()) }
}

// PartitionSubjects returns the n subject filters pattern makes with
// fmt.Sprintf(pattern, i) for i in 0..n-1: the partitions of a stream
// whose subjects carry a partition number, such as one with a subject
// transform "orders.*" -> "orders.{{partition(4,1)}}.{{wildcard(1)}}",
// read with PartitionSubjects("orders.%d.*", 4).
func PartitionSubjects(pattern string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(pattern, i)
	}
	return out
}

// Validate reports the first invalid setting.
func (c *SourceConfig[T]) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("nats: source: no URL")
	case c.Stream == "":
		return errors.New("nats: source: no stream")
	case !validName(c.Stream):
		return fmt.Errorf("nats: source: stream name %q: no spaces, dots, * or >", c.Stream)
	case c.Consumer == "":
		return fmt.Errorf("nats: source %s: no Consumer name (unique to this source among the jobs reading the stream)", c.Stream)
	case !validName(c.Consumer):
		return fmt.Errorf("nats: source %s: consumer name %q: no spaces, dots, * or >", c.Stream, c.Consumer)
	case c.Deserializer == nil:
		return fmt.Errorf("nats: source %s: no deserializer", c.Stream)
	case c.FetchBatch < 0:
		return fmt.Errorf("nats: source %s: negative fetch batch", c.Stream)
	case c.AckWait < 0 || c.RequestTimeout < 0:
		return fmt.Errorf("nats: source %s: negative timeout", c.Stream)
	}
	for i, s := range c.Subjects {
		if !validSubject(s) {
			return fmt.Errorf("nats: source %s: subject filter %q is not a valid subject", c.Stream, s)
		}
		for _, o := range c.Subjects[:i] {
			if subjectsOverlap(s, o) {
				return fmt.Errorf("nats: source %s: subject filters %q and %q overlap: a message would be read twice", c.Stream, o, s)
			}
		}
	}
	return nil
}

// Source returns the messages of the configured stream as a timestamped
// stream (see the package doc). Bad configuration is reported by
// Execute, and so is, before any record is read, a server that cannot be
// reached or a stream that does not exist or lacks the subjects.
func Source[T any](env *weir.Environment, cfg SourceConfig[T]) *weir.Stream[T] {
	verr := cfg.Validate()
	env.ReportError(verr)
	if cfg.Logger == nil {
		cfg.Logger = env.Logger()
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 10 * time.Minute
	}
	if cfg.FetchBatch == 0 {
		cfg.FetchBatch = 1024
	}
	if ck, on := env.Checkpointing(); on && verr == nil && cfg.AckWait <= ck.Interval {
		cfg.Logger.Warn("the NATS source's ack wait does not exceed the checkpoint interval: the server redelivers messages before they are acknowledged",
			zap.Duration("ackWait", cfg.AckWait), zap.Duration("checkpointInterval", ck.Interval))
	}
	strategy := cfg.Watermarks
	if strategy == nil {
		strategy = weir.NoWatermarks[T](nil)
	}
	name := "nats source " + cfg.Stream
	if verr == nil {
		env.CheckBeforeRun(func(ctx context.Context) error { return checkSource(ctx, &cfg) })
	}
	return weir.FromSplitReader(env, name, strategy, func(sub, par int) (weir.SplitReader[T], error) {
		return &reader[T]{cfg: &cfg, sub: sub, par: par,
			log:   cfg.Logger.With(zap.String("source", name), zap.Int("subtask", sub)),
			ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}, nil
	})
}

// connect connects to cfg's servers, failing after timeout. lost, if
// set, is called once the connection is lost (not when closed by Close):
// the client would reconnect and carry on, but a task of weir fails
// instead, so that the job fails over and restores its latest checkpoint
// whatever was in flight.
func connect(url, name string, timeout time.Duration, opts []natsgo.Option, lost func(error)) (*natsgo.Conn, error) {
	o := append([]natsgo.Option{natsgo.Name(name), natsgo.Timeout(timeout)}, opts...)
	if lost != nil {
		o = append(o, onLost(lost))
	}
	nc, err := natsgo.Connect(url, o...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	return nc, nil
}

// onLost chains lost before the disconnection handler of the options
// given, if any.
func onLost(lost func(error)) natsgo.Option {
	return func(o *natsgo.Options) error {
		prev := o.DisconnectedErrCB
		o.DisconnectedErrCB = func(nc *natsgo.Conn, err error) {
			if !nc.IsClosed() {
				if err == nil {
					err = errors.New("disconnected")
				}
				lost(fmt.Errorf("lost the connection to %s: %w", serverOf(nc), err))
			}
			if prev != nil {
				prev(nc, err)
			}
		}
		return nil
	}
}

func serverOf(nc *natsgo.Conn) string {
	if u := nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	return "the server"
}

// checkSource checks, before the job runs, that the stream exists and
// has the subjects filtered.
func checkSource[T any](ctx context.Context, cfg *SourceConfig[T]) error {
	nc, err := connect(cfg.URL, "weir nats source check", cfg.RequestTimeout, cfg.Options, nil)
	if err != nil {
		return fmt.Errorf("nats: source %s: %w", cfg.Stream, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	info, err := streamInfo(ctx, nc, cfg.Stream)
	if err != nil {
		return fmt.Errorf("nats: source: %w", err)
	}
	for _, f := range cfg.Subjects {
		if !coveredBy(f, info.Config.Subjects) {
			return fmt.Errorf("nats: source %s: subject filter %q matches none of the stream's subjects %v", cfg.Stream, f, info.Config.Subjects)
		}
	}
	return nil
}

func streamInfo(ctx context.Context, nc *natsgo.Conn, stream string) (*jetstream.StreamInfo, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("stream %q does not exist at %s", stream, nc.ConnectedUrlRedacted())
		}
		return nil, fmt.Errorf("stream %s at %s: %w", stream, nc.ConnectedUrlRedacted(), err)
	}
	return s.CachedInfo(), nil
}

// split is one subject filter a subtask reads.
type split struct {
	filter string // "" for the whole stream
	id     string // split id
	next   uint64 // stream sequence of the next message to read
	stop   uint64 // bounded: the last sequence to read; noStop otherwise
	done   bool

	pending int  // messages fetched, not read yet
	backlog bool // as told to the splits register
}

const noStop = ^uint64(0)

func splitID(stream, filter string) string {
	if filter == "" {
		return stream
	}
	return stream + ":" + filter
}

// owner is the subtask of par that reads the i-th configured subject
// filter: round robin, so that every attempt agrees and a rescale moves
// each filter with its position.
func owner(i, par int) int { return i % par }

// reader reads a subtask's splits through one pull consumer. Its fields
// belong to the task's goroutine, except mu's, shared with the fetcher
// goroutine.
type reader[T any] struct {
	cfg      *SourceConfig[T]
	sub, par int
	log      *zap.Logger

	// From Seek or Rescale, before Start.
	restored        map[string]*split
	restoredStarted bool
	restoredCreated int64 // the creation time of the stream restored positions are of (0: unknown)

	nc      *natsgo.Conn
	cons    jetstream.Consumer
	started bool
	created int64 // the creation time of the stream read, from Start
	splits  *weir.Splits
	owned   []*split // in configuration order, finished ones too
	active  int      // not done
	finish  []*split // done, their splits to remove
	batch   []jetstream.Msg
	bi      int
	// The split of the previous message's subject.
	lastSubject string
	lastSplit   *split
	// The last message delivered, and the positions of checkpoints not yet
	// complete with the message to acknowledge when they are.
	lastMsg jetstream.Msg
	acks    []pendingAck
	// explicit: a work-queue stream, whose consumers must acknowledge each
	// message; delivered holds those since the last position.
	explicit  bool
	delivered []jetstream.Msg

	ctx    context.Context // of the fetcher
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ready  chan struct{} // buffered(1): messages or an error are there
	space  chan struct{} // buffered(1): the task took the buffered messages
	mu     struct {
		sync.Mutex
		msgs []jetstream.Msg
		err  error
	}
}

type pendingAck struct {
	pos  []byte
	msg  jetstream.Msg   // AckAll: the last delivered
	msgs []jetstream.Msg // explicit: every one delivered since the previous position
}

// maxPendingAcks bounds the positions kept for acknowledgement while no
// checkpoint completes (the oldest go: a later acknowledgement covers
// them).
const maxPendingAcks = 64

func (r *reader[T]) Start(splits *weir.Splits) error {
	r.splits = splits
	nc, err := connect(r.cfg.URL, fmt.Sprintf("weir nats source %s %d", r.cfg.Stream, r.sub), r.cfg.RequestTimeout, r.cfg.Options, r.lost)
	if err != nil {
		return fmt.Errorf("nats: source %s: %w", r.cfg.Stream, err)
	}
	r.nc, r.started = nc, true
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: source %s: %w", r.cfg.Stream, err)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.RequestTimeout)
	defer cancel()
	stream, err := js.Stream(ctx, r.cfg.Stream)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("nats: source: stream %q does not exist", r.cfg.Stream)
		}
		return fmt.Errorf("nats: source %s: %w", r.cfg.Stream, err)
	}
	info := stream.CachedInfo()
	r.created = info.Created.UnixNano()
	if r.restoredCreated != 0 && r.restoredCreated != r.created {
		// Deleted and created again under its name: its sequence numbers
		// number other messages now.
		return fmt.Errorf("%w: nats: source: stream %q was created at %s, but the restored positions are sequence numbers of the stream "+
			"of that name created at %s, which would be read as positions of other messages: give the source a new UID "+
			"(it starts from its Start; restore WithAllowNonRestoredState(true) to drop the old positions)", weir.ErrSourceChanged,
			r.cfg.Stream, info.Created.UTC().Format(time.RFC3339Nano), time.Unix(0, r.restoredCreated).UTC().Format(time.RFC3339Nano))
	}

	filters := r.cfg.Subjects
	if len(filters) == 0 {
		filters = []string{""}
	}
	for i, f := range filters {
		if owner(i, r.par) != r.sub {
			continue
		}
		s := r.restored[f]
		if s == nil {
			s = &split{filter: f, stop: noStop}
			start := r.cfg.Start
			if r.restoredStarted {
				start = Earliest() // new since the checkpoint
			}
			switch start.kind {
			case earliest:
				s.next = 1
			case latest:
				s.next = info.State.LastSeq + 1
			case atSequence:
				s.next = start.seq
			}
		}
		s.id = splitID(r.cfg.Stream, f)
		r.owned = append(r.owned, s)
	}
	for f := range r.restored {
		if !containsFilter(filters, f) {
			r.log.Warn("a subject filter of the restored checkpoint is no longer configured; dropping it", zap.String("filter", f))
		}
	}
	if r.cfg.Bounded {
		if err := r.resolveStops(ctx, stream, info); err != nil {
			return err
		}
	}
	if err := r.deleteLingering(ctx, js, stream); err != nil {
		return err
	}
	var live []string
	from := noStop
	for _, s := range r.owned {
		if s.stop != noStop && s.next > s.stop {
			s.done = true
			continue
		}
		r.active++
		splits.Add(s.id)
		live = append(live, s.filter)
		from = min(from, s.next)
	}
	if r.active == 0 {
		return nil
	}
	if from < info.State.FirstSeq {
		r.log.Warn("the stream no longer holds messages the source has not read (retention removed them)",
			zap.Uint64("next", from), zap.Uint64("firstInStream", info.State.FirstSeq))
	}
	r.explicit = info.Config.Retention == jetstream.WorkQueuePolicy
	ackPolicy := jetstream.AckAllPolicy
	if r.explicit {
		ackPolicy = jetstream.AckExplicitPolicy // a work queue takes no other
	}
	cc := jetstream.ConsumerConfig{
		Name:              r.consumerName(r.sub),
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		AckPolicy:         ackPolicy,
		AckWait:           r.cfg.AckWait,
		MaxAckPending:     -1,
		InactiveThreshold: max(r.cfg.AckWait, 10*time.Minute),
		Description:       "weir nats source",
	}
	if r.explicit {
		// A work queue delivers from its first message (what is acknowledged
		// is gone); the positions skip the rest.
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverAllPolicy, 0
	}
	switch {
	case len(live) == 1 && live[0] != "":
		cc.FilterSubject = live[0]
	case len(live) > 1:
		cc.FilterSubjects = live
	}
	cons, err := js.CreateConsumer(ctx, r.cfg.Stream, cc)
	if err != nil {
		return fmt.Errorf("nats: source %s: creating consumer %s: %w", r.cfg.Stream, cc.Name, err)
	}
	r.cons = cons
	if len(r.owned) == 1 {
		r.lastSplit = r.owned[0]
	}
	r.wg.Go(r.fetch)
	return nil
}

func containsFilter(fs []string, f string) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}

func (r *reader[T]) consumerName(sub int) string { return r.cfg.Consumer + "-" + strconv.Itoa(sub) }

// deleteLingering deletes the consumers of this source's name that a
// subtask index this subtask answers for (index mod parallelism) left:
// its own of a failed attempt, and those of higher indexes of a run at a
// higher parallelism.
func (r *reader[T]) deleteLingering(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream) error {
	lister := stream.ConsumerNames(ctx)
	var names []string
	for n := range lister.Name() {
		rest, ok := strings.CutPrefix(n, r.cfg.Consumer+"-")
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(rest); err == nil && i >= 0 && i%r.par == r.sub {
			names = append(names, n)
		}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("nats: source %s: listing consumers: %w", r.cfg.Stream, err)
	}
	for _, n := range names {
		if err := js.DeleteConsumer(ctx, r.cfg.Stream, n); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("nats: source %s: deleting consumer %s: %w", r.cfg.Stream, n, err)
		}
	}
	return nil
}

// resolveStops sets the stop of splits that have none: the sequence of
// the last message of their filter now (0: none, the split is done).
func (r *reader[T]) resolveStops(ctx context.Context, stream jetstream.Stream, info *jetstream.StreamInfo) error {
	for _, s := range r.owned {
		if s.stop != noStop {
			continue
		}
		if s.filter == "" {
			s.stop = info.State.LastSeq
			continue
		}
		m, err := stream.GetLastMsgForSubject(ctx, s.filter)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			s.stop = 0
		case err != nil:
			return fmt.Errorf("nats: source %s: the last message of %s: %w", r.cfg.Stream, s.filter, err)
		default:
			s.stop = m.Sequence
		}
	}
	return nil
}

// fetch pulls messages and hands them to the task in bursts: whatever
// arrived before the client's buffer ran dry, so that under load the task
// takes many messages per hand-over. It stops at the first error, which
// Poll returns.
func (r *reader[T]) fetch() {
	var local []jetstream.Msg
	limit := 2 * r.cfg.FetchBatch
	for r.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		batch, err := r.cons.Fetch(r.cfg.FetchBatch, jetstream.FetchContext(ctx), jetstream.FetchHeartbeat(time.Second))
		if err == nil {
			for m := range batch.Messages() {
				local = append(local, m)
				if len(batch.Messages()) == 0 || len(local) >= r.cfg.FetchBatch {
					if local = r.handOver(local, limit); local == nil {
						cancel()
						return
					}
				}
			}
			err = batch.Error()
		}
		cancel()
		if err != nil && r.ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			r.mu.Lock()
			r.mu.err = fmt.Errorf("nats: source %s: fetching from consumer %s: %w", r.cfg.Stream, r.consumerName(r.sub), err)
			r.mu.Unlock()
			signal(r.ready)
			return
		}
	}
}

// lost fails the source once its connection is lost (see connect).
func (r *reader[T]) lost(err error) {
	r.mu.Lock()
	if r.mu.err == nil {
		r.mu.err = fmt.Errorf("nats: source %s: %w", r.cfg.Stream, err)
	}
	r.mu.Unlock()
	signal(r.ready)
}

// handOver adds local to the messages for the task, waiting while those
// exceed limit; it returns local emptied, or nil once the reader closes.
func (r *reader[T]) handOver(local []jetstream.Msg, limit int) []jetstream.Msg {
	for {
		r.mu.Lock()
		if len(r.mu.msgs) < limit {
			r.mu.msgs = append(r.mu.msgs, local...)
			r.mu.Unlock()
			signal(r.ready)
			clear(local)
			return local[:0]
		}
		r.mu.Unlock()
		select {
		case <-r.space:
		case <-r.ctx.Done():
			return nil
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (r *reader[T]) Poll() (weir.SplitRecord[T], weir.ReadStatus, error) {
	var zero weir.SplitRecord[T]
	r.removeFinished()
	for {
		for r.bi < len(r.batch) {
			m := r.batch[r.bi]
			r.batch[r.bi] = nil
			r.bi++
			seq, tm, ok := parseAck(m.Reply())
			if !ok {
				return zero, weir.EndOfInput, fmt.Errorf("nats: source %s: a message without JetStream metadata (reply %q)", r.cfg.Stream, m.Reply())
			}
			r.lastMsg = m
			if r.explicit {
				r.delivered = append(r.delivered, m)
			}
			s := r.splitOf(m.Subject())
			if s == nil {
				continue // not ours (the filters changed)
			}
			s.pending--
			if s.done || seq < s.next {
				r.updateBacklog(s)
				continue // finished, or seen (a redelivery)
			}
			if seq > s.stop {
				r.done(s)
				continue
			}
			s.next = seq + 1
			r.updateBacklog(s)
			if s.next > s.stop {
				r.done(s) // its split goes at the next poll, after this record
			}
			ts := int64(tm / 1e6)
			if h := r.cfg.TimestampHeader; h != "" {
				var err error
				if ts, err = headerTime(m, h); err != nil {
					if err = r.bad(seq, err); err != nil {
						return zero, weir.EndOfInput, err
					}
					continue
				}
			}
			v, err := r.cfg.Deserializer(m)
			if err != nil {
				if err = r.bad(seq, fmt.Errorf("deserializing: %w", err)); err != nil {
					return zero, weir.EndOfInput, err
				}
				continue
			}
			return weir.SplitRecord[T]{Value: v, Split: s.id, Timestamp: ts}, weir.Read, nil
		}
		r.batch, r.bi = r.batch[:0], 0
		r.removeFinished()
		if r.active == 0 {
			if r.cfg.Bounded {
				return zero, weir.EndOfInput, nil
			}
			return zero, weir.NothingAvailable, nil
		}
		if err := r.take(); err != nil {
			return zero, weir.EndOfInput, err
		}
		if len(r.batch) == 0 {
			return zero, weir.NothingAvailable, nil
		}
	}
}

// bad fails the source for a bad message, or skips it.
func (r *reader[T]) bad(seq uint64, err error) error {
	err = fmt.Errorf("nats: source %s: stream sequence %d: %w", r.cfg.Stream, seq, err)
	if !r.cfg.SkipBadRecords {
		return err
	}
	if r.cfg.Skipped != nil {
		r.cfg.Skipped.Add(1)
	}
	r.log.Warn("skipping a message", zap.Error(err))
	return nil
}

func headerTime(m jetstream.Msg, name string) (int64, error) {
	h := m.Headers()
	if h == nil {
		return eventtime.NoTimestamp, fmt.Errorf("no %s header", name)
	}
	v := h.Get(name)
	if v == "" {
		return eventtime.NoTimestamp, fmt.Errorf("no %s header", name)
	}
	ts, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return eventtime.NoTimestamp, fmt.Errorf("header %s: %q is not unix milliseconds", name, v)
	}
	return ts, nil
}

// splitOf returns the owned split whose filter matches subject.
func (r *reader[T]) splitOf(subject string) *split {
	if len(r.owned) == 1 {
		if s := r.owned[0]; s.filter == "" || subjectMatches(s.filter, subject) {
			return s
		}
		return nil
	}
	if r.lastSplit != nil && subject == r.lastSubject {
		return r.lastSplit
	}
	for _, s := range r.owned {
		if subjectMatches(s.filter, subject) {
			r.lastSubject, r.lastSplit = subject, s
			return s
		}
	}
	return nil
}

// take moves the fetched messages into the batch, or returns the
// fetcher's error.
func (r *reader[T]) take() error {
	r.mu.Lock()
	err := r.mu.err
	r.batch, r.mu.msgs = r.mu.msgs, r.batch[:0]
	r.mu.Unlock()
	if err != nil {
		return err
	}
	signal(r.space)
	for _, m := range r.batch {
		if s := r.splitOf(m.Subject()); s != nil {
			s.pending++
		}
	}
	for _, s := range r.owned {
		r.updateBacklog(s)
	}
	return nil
}

// updateBacklog tells the splits register whether s has messages to
// read, so that s does not turn idle while it waits its turn.
func (r *reader[T]) updateBacklog(s *split) {
	b := !s.done && s.pending > 0
	if b != s.backlog {
		s.backlog = b
		r.splits.SetBacklog(s.id, b)
	}
}

func (r *reader[T]) done(s *split) {
	s.done = true
	r.active--
	r.finish = append(r.finish, s)
}

func (r *reader[T]) removeFinished() {
	for _, s := range r.finish {
		r.splits.Remove(s.id)
	}
	r.finish = r.finish[:0]
}

func (r *reader[T]) Available() <-chan struct{} { return r.ready }

// Close stops the fetcher and the connection.
func (r *reader[T]) Close() error {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	if r.nc != nil {
		r.nc.Close()
	}
	return nil
}
