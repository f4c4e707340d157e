package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/connectors/internal/txnname"
	"github.com/weirstream/weir/eventtime"
)

// Guarantee is a sink's delivery guarantee.
type Guarantee uint8

const (
	// AtLeastOnce flushes the records at every checkpoint (the default):
	// after a failure, those written since the restored checkpoint are
	// written again.
	AtLeastOnce Guarantee = iota
	// ExactlyOnce writes through Kafka transactions committed with the
	// checkpoints (see the package doc); it needs checkpointing and a
	// TransactionalIDPrefix.
	ExactlyOnce
	// None flushes only when the sink ends: a failure may lose records.
	None
)

func (g Guarantee) String() string {
	switch g {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	case None:
		return "none"
	}
	return fmt.Sprintf("Guarantee(%d)", uint8(g))
}

// ErrTransactionLost is returned (wrapped, with the transaction) when a
// pre-committed transaction can no longer be committed: the broker
// aborted it, usually because it was open longer than the transaction
// timeout. Its records are lost; raise SinkConfig.TransactionTimeout.
var ErrTransactionLost = errors.New("kafka: transaction lost")

// Registered, so that errors.Is matches it on a job's error in cluster
// mode too (weir.RegisterError).
func init() {
	if err := weir.RegisterError("kafka.transaction-lost", ErrTransactionLost); err != nil {
		panic(err)
	}
}

// SinkConfig configures Sink. Zero values mean the documented defaults.
type SinkConfig[T any] struct {
	// Brokers are the seed brokers, host:port (required).
	Brokers []string
	// Topic receives every record, unless TopicSelector picks one per
	// value. One of them is required.
	Topic         string
	TopicSelector func(v T) string
	// Value serializes a value into the record value (required); Key, if
	// set, into its key.
	Value func(v T) ([]byte, error)
	Key   func(v T) ([]byte, error)
	// Partitioner picks the partition of each record (default: franz-go's,
	// by key hash, records without a key spread).
	Partitioner kgo.Partitioner
	// Guarantee is the delivery guarantee (default AtLeastOnce).
	Guarantee Guarantee
	// TransactionalIDPrefix names the sink's transactions (exactly-once):
	// prefix-subtask-checkpoint. It must be unique to this sink among all
	// the jobs writing to the cluster: at startup the sink aborts the open
	// transactions of its prefix that failed attempts left.
	TransactionalIDPrefix string
	// TransactionTimeout is how long the broker keeps a transaction open
	// before aborting it (default 10 min; brokers cap it at their
	// transaction.max.timeout.ms, 15 min by default). It must exceed the
	// checkpoint interval, and should exceed it by the time a failed job
	// takes to restart.
	TransactionTimeout time.Duration
	// RequestTimeout bounds a flush, a commit or an abort (default 1 min);
	// a record not delivered by the flush that follows it fails the job.
	// (No delivery timeout per record: franz-go counts it from the
	// record's timestamp, which is its event time here.)
	RequestTimeout time.Duration
	// ClientOptions are passed to the franz-go clients last (TLS, SASL,
	// batching).
	ClientOptions []kgo.Opt
	// Logger (default: the job's).
	Logger *zap.Logger
}

// restartMargin is the time the transaction timeout should leave beyond
// the checkpoint interval, for the job to notice a failure, restart and
// commit: below it Sink warns.
const restartMargin = time.Minute

// Validate reports the first invalid setting.
func (c *SinkConfig[T]) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafka: sink: no brokers")
	case c.Topic == "" && c.TopicSelector == nil:
		return errors.New("kafka: sink: set Topic or TopicSelector")
	case c.Value == nil:
		return errors.New("kafka: sink: no value serializer")
	case c.Guarantee > None:
		return fmt.Errorf("kafka: sink: unknown guarantee %d", c.Guarantee)
	case c.TransactionTimeout < 0 || c.RequestTimeout < 0:
		return errors.New("kafka: sink: negative timeout")
	case c.Guarantee == ExactlyOnce && c.TransactionalIDPrefix == "":
		return errors.New("kafka: sink: exactly-once needs a TransactionalIDPrefix, unique to this sink")
	case c.Guarantee == ExactlyOnce && c.TransactionTimeout > 0 && c.TransactionTimeout < time.Second:
		return fmt.Errorf("kafka: sink: transaction timeout %v below a second", c.TransactionTimeout)
	}
	return nil
}

// Sink writes s to Kafka with the configured guarantee. Bad
// configuration, and an exactly-once sink whose transaction timeout does
// not exceed the checkpoint interval, are reported by Execute.
func Sink[T any](s *weir.Stream[T], cfg SinkConfig[T]) *weir.Sink {
	env := s.Environment()
	if cfg.Logger == nil {
		cfg.Logger = env.Logger()
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = 10 * time.Minute
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = time.Minute
	}
	err := cfg.Validate()
	if ck, on := env.Checkpointing(); err == nil && cfg.Guarantee == ExactlyOnce {
		switch {
		case !on:
			err = errors.New("kafka: sink: exactly-once needs checkpointing (weir.WithCheckpointing)")
		case cfg.TransactionTimeout <= ck.Interval:
			err = fmt.Errorf("kafka: sink: transaction timeout %v must exceed the checkpoint interval %v", cfg.TransactionTimeout, ck.Interval)
		case cfg.TransactionTimeout < ck.Interval+restartMargin:
			cfg.Logger.Warn("the Kafka transaction timeout leaves little time beyond the checkpoint interval: a transaction the broker aborts before the job commits it after a restart is lost",
				zap.Duration("transactionTimeout", cfg.TransactionTimeout), zap.Duration("checkpointInterval", ck.Interval),
				zap.Duration("recommendedAtLeast", ck.Interval+restartMargin))
		}
	}
	env.ReportError(err)
	name := "kafka sink " + cfg.Topic
	return weir.TwoPhaseCommitSink(s, txnCodec{}, func(sub, par int) (weir.TwoPhaseCommitter[T, *txn], error) {
		c := &committer[T]{cfg: &cfg, sub: sub, par: par, log: cfg.Logger.With(zap.String("sink", name), zap.Int("subtask", sub))}
		c.promise = c.delivered
		return c, nil
	}).Name(name)
}

// txn is a sink transaction as checkpointed: its transactional id and
// flags (weir.TxnHandle), and the producer id and epoch the pre-commit
// sets. For at-least-once and none it is empty: the guarantee needs no
// handle.
type txn struct {
	weir.TxnHandle
	ProducerID int64
	Epoch      int16
}

// txnCodec encodes a *txn as a weir.TxnHandle with the producer id (8
// bytes) and epoch (2) as its extra fields.
type txnCodec struct{}

func (txnCodec) Append(dst []byte, t *txn) []byte {
	var extra [10]byte
	binary.BigEndian.PutUint64(extra[:], uint64(t.ProducerID))
	binary.BigEndian.PutUint16(extra[8:], uint16(t.Epoch))
	return weir.AppendTxnHandle(dst, t.TxnHandle, extra[:])
}

func (txnCodec) Decode(src []byte) (*txn, error) {
	h, extra, err := weir.DecodeTxnHandle(src, 10)
	if err != nil {
		return nil, fmt.Errorf("kafka: sink transaction: %w", err)
	}
	return &txn{TxnHandle: h, ProducerID: int64(binary.BigEndian.Uint64(extra)), Epoch: int16(binary.BigEndian.Uint16(extra[8:]))}, nil
}

// committer is one sink subtask's TwoPhaseCommitter. Exactly-once: a
// client per transaction, closed once pre-committed (the transaction
// stays open on the broker), commits with a raw EndTxn. Otherwise one
// client for the subtask's life.
type committer[T any] struct {
	cfg      *SinkConfig[T]
	sub, par int
	log      *zap.Logger

	cl      *kgo.Client // the open transaction's, or the shared one
	open    *txn        // exactly-once: the transaction of cl
	records int64       // written into open
	cleaned bool        // lingering transactions aborted
	// oldPrefixes are the prefixes of restored transactions other than
	// TransactionalIDPrefix (it changed across the restore): their
	// lingering transactions are aborted too.
	oldPrefixes txnname.OldPrefixes
	ctx         context.Context // the task's (SetContext), nil: none
	admin       *kgo.Client     // for EndTxn and listing, nil until needed
	closed      bool
	failed      bool // None: aborted, so nothing to flush at Close

	promise func(*kgo.Record, error)
	mu      struct {
		sync.Mutex
		err error // the first delivery error
	}
}

var (
	_ weir.TwoPhaseCommitter[int, *txn] = (*committer[int])(nil)
	_ weir.CheckpointBeginner[*txn]     = (*committer[int])(nil)
	_ weir.ContextSetter                = (*committer[int])(nil)
	_ weir.TimestampWriter[int, *txn]   = (*committer[int])(nil)
)

func (c *committer[T]) delivered(_ *kgo.Record, err error) {
	if err != nil {
		c.mu.Lock()
		if c.mu.err == nil {
			c.mu.err = err
		}
		c.mu.Unlock()
	}
}

func (c *committer[T]) deliveryErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err != nil {
		return fmt.Errorf("kafka: sink: writing a record: %w", c.mu.err)
	}
	return nil
}

func (c *committer[T]) newClient(extra ...kgo.Opt) (*kgo.Client, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(c.cfg.Brokers...)}
	if c.cfg.Partitioner != nil {
		opts = append(opts, kgo.RecordPartitioner(c.cfg.Partitioner))
	}
	opts = append(append(opts, extra...), c.cfg.ClientOptions...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: sink client: %w", err)
	}
	return cl, nil
}

func (c *committer[T]) Begin() (*txn, error) { return c.BeginAfter(0) }

// SetContext implements weir.ContextSetter.
func (c *committer[T]) SetContext(ctx context.Context) { c.ctx = ctx }

// requestCtx bounds one request (a flush, a commit, an abort) by
// RequestTimeout and, until Close, by the task's context.
func (c *committer[T]) requestCtx() (context.Context, context.CancelFunc) {
	parent := c.ctx
	if parent == nil || c.closed {
		parent = context.Background()
	}
	return context.WithTimeout(parent, c.cfg.RequestTimeout)
}

// BeginAfter starts transaction prefix-subtask-(last+1). The first call
// aborts what failed attempts left open.
func (c *committer[T]) BeginAfter(last barrier.CheckpointID) (*txn, error) {
	if c.cfg.Guarantee != ExactlyOnce {
		if c.cl == nil {
			cl, err := c.newClient()
			if err != nil {
				return nil, err
			}
			c.cl = cl
		}
		return &txn{}, nil
	}
	if !c.cleaned {
		if err := c.abortLingering(last); err != nil {
			return nil, err
		}
		c.cleaned = true
	}
	id := fmt.Sprintf("%s-%d-%d", c.cfg.TransactionalIDPrefix, c.sub, last+1)
	cl, err := c.newClient(kgo.TransactionalID(id), kgo.TransactionTimeout(c.cfg.TransactionTimeout))
	if err != nil {
		return nil, err
	}
	if err := cl.BeginTransaction(); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka: sink: beginning transaction %s: %w", id, err)
	}
	c.cl, c.open, c.records = cl, &txn{TxnHandle: weir.TxnHandle{ID: id}}, 0
	return c.open, nil
}

func (c *committer[T]) Write(t *txn, v T) error {
	return c.WriteTimestamped(t, v, eventtime.NoTimestamp)
}

// WriteTimestamped implements weir.TimestampWriter: a record with an event
// timestamp gets it as its Kafka timestamp (Flink's default); without
// one, the client sets the time of production.
func (c *committer[T]) WriteTimestamped(_ *txn, v T, ts int64) error {
	if err := c.deliveryErr(); err != nil {
		return err
	}
	rec := &kgo.Record{Topic: c.cfg.Topic}
	if ts != eventtime.NoTimestamp {
		rec.Timestamp = time.UnixMilli(ts)
	}
	if c.cfg.TopicSelector != nil {
		rec.Topic = c.cfg.TopicSelector(v)
	}
	var err error
	if c.cfg.Key != nil {
		if rec.Key, err = c.cfg.Key(v); err != nil {
			return fmt.Errorf("kafka: sink: serializing a key: %w", err)
		}
	}
	if rec.Value, err = c.cfg.Value(v); err != nil {
		return fmt.Errorf("kafka: sink: serializing a value: %w", err)
	}
	c.cl.Produce(context.Background(), rec, c.promise)
	c.records++
	return nil
}

// PreCommit flushes (exactly-once and at-least-once). An exactly-once
// transaction then records its producer id and epoch for the commit, and
// its client closes: the transaction stays open on the broker.
func (c *committer[T]) PreCommit(t *txn) error {
	if c.cfg.Guarantee == None {
		return nil
	}
	ctx, cancel := c.requestCtx()
	defer cancel()
	if c.cfg.Guarantee == AtLeastOnce {
		if err := c.cl.Flush(ctx); err != nil {
			return fmt.Errorf("kafka: sink: flush: %w", err)
		}
		return c.deliveryErr()
	}
	if t != c.open {
		return nil // pre-committed already
	}
	if err := c.cl.Flush(ctx); err != nil {
		return fmt.Errorf("kafka: sink: flushing transaction %s: %w", t.ID, err)
	}
	if err := c.deliveryErr(); err != nil {
		return err
	}
	if c.records == 0 {
		t.Empty = true
	} else {
		pid, epoch, err := c.cl.ProducerID(ctx)
		if err != nil {
			return fmt.Errorf("kafka: sink: transaction %s: producer id: %w", t.ID, err)
		}
		t.ProducerID, t.Epoch = pid, epoch
	}
	t.PreCommitted = true
	c.cl.Close()
	c.cl, c.open = nil, nil
	return nil
}

// Commit commits a pre-committed transaction with EndTxn, as whichever
// client committed it first would: committing one already committed is
// answered with success.
func (c *committer[T]) Commit(t *txn) error {
	c.noteRestored(t)
	if c.cfg.Guarantee != ExactlyOnce || t.Empty {
		return nil
	}
	return c.withAdmin(func(ctx context.Context, adm *kgo.Client) error {
		return endTxn(ctx, adm, c.freshAdmin, t, true)
	})
}

// endTxn ends t with its stored producer id and epoch, retrying while the
// coordinator is busy or has moved. fresh returns a new client: after a
// broker restart a client can keep asking a coordinator that is no longer
// one.
func endTxn(ctx context.Context, cl *kgo.Client, fresh func() (*kgo.Client, error), t *txn, commit bool) error {
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = t.ID, t.ProducerID, t.Epoch, commit
	backoff := 10 * time.Millisecond
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, kerr.NotCoordinator), errors.Is(err, kerr.CoordinatorNotAvailable):
				if c, ferr := fresh(); ferr == nil {
					cl = c
				}
			case errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.ProducerFenced),
				errors.Is(err, kerr.InvalidTxnState), errors.Is(err, kerr.InvalidProducerIDMapping),
				errors.Is(err, kerr.TransactionalIDNotFound):
				return fmt.Errorf("%w: %s (producer id %d, epoch %d): %v: the broker aborted it or another producer took over its id",
					ErrTransactionLost, t.ID, t.ProducerID, t.Epoch, err)
			case !kerr.IsRetriable(err) && !errors.Is(err, kerr.ConcurrentTransactions):
				return fmt.Errorf("kafka: sink: ending transaction %s: %w", t.ID, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: sink: ending transaction %s: %w (last: %v)", t.ID, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Abort aborts a transaction: the open one through its client, a
// pre-committed one with EndTxn (gone already is fine). A restored
// transaction that was open at the checkpoint is left to the lingering
// cleanup of the subtask that answers for its name, which runs before that
// subtask reuses the name: fencing it from here could hit the new
// transaction of that name.
func (c *committer[T]) Abort(t *txn) error {
	c.noteRestored(t)
	switch c.cfg.Guarantee {
	case None:
		c.failed = true
		return nil
	case AtLeastOnce:
		return nil
	}
	if t == c.open && c.cl != nil {
		ctx, cancel := c.requestCtx()
		defer cancel()
		cl := c.cl
		c.cl, c.open = nil, nil
		defer cl.Close()
		if err := cl.AbortBufferedRecords(ctx); err != nil {
			return fmt.Errorf("kafka: sink: aborting transaction %s: %w", t.ID, err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			return fmt.Errorf("kafka: sink: aborting transaction %s: %w", t.ID, err)
		}
		return nil
	}
	if !t.PreCommitted || t.Empty {
		return nil
	}
	err := c.withAdmin(func(ctx context.Context, adm *kgo.Client) error { return endTxn(ctx, adm, c.freshAdmin, t, false) })
	if errors.Is(err, ErrTransactionLost) {
		return nil // ended or taken over already
	}
	return err
}

// noteRestored records the prefix of a restored transaction's ID if the
// sink's prefix changed since: the failed attempt may have left
// transactions open under the old one, holding back read-committed
// consumers until their timeout.
func (c *committer[T]) noteRestored(t *txn) {
	if c.cleaned || c.cfg.Guarantee != ExactlyOnce {
		return
	}
	if p, ok := c.oldPrefixes.Note(c.cfg.TransactionalIDPrefix, t.ID); ok {
		c.log.Warn("the sink's TransactionalIDPrefix changed since the checkpoint it restores; aborting the old prefix's lingering transactions too",
			zap.String("old", p), zap.String("new", c.cfg.TransactionalIDPrefix))
	}
}

// fence initializes transactional id id: the broker aborts its open
// transaction, if any, and bumps its epoch.
func (c *committer[T]) fence(id string) error {
	cl, err := c.newClient(kgo.TransactionalID(id), kgo.TransactionTimeout(c.cfg.TransactionTimeout))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := c.requestCtx()
	defer cancel()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("kafka: sink: aborting transaction %s: %w", id, err)
	}
	return nil
}

// abortLingering aborts the open transactions of this sink's prefix (and
// of its prefixes before a change, oldPrefixes) that no checkpoint up to
// last holds: named after a later checkpoint, by a
// subtask index this subtask answers for (index mod parallelism), so the
// subtasks share the work without touching each other's new
// transactions, even after a rescale.
func (c *committer[T]) abortLingering(last barrier.CheckpointID) error {
	var ids []string
	err := c.withAdmin(func(ctx context.Context, adm *kgo.Client) error {
		lts, err := kadm.NewClient(adm).ListTransactions(ctx, nil, nil)
		if err != nil {
			return err
		}
		for id, lt := range lts {
			for _, prefix := range append([]string{c.cfg.TransactionalIDPrefix}, c.oldPrefixes...) {
				sub, ckpt, ok := parseTxnID(prefix, id)
				if ok && sub%c.par == c.sub && ckpt > uint64(last) && lt.State == "Ongoing" {
					ids = append(ids, id)
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, kerr.UnsupportedVersion) {
			c.log.Warn("the brokers cannot list transactions: lingering transactions of failed attempts stay open until their timeout, holding back read-committed consumers")
			return nil
		}
		return fmt.Errorf("kafka: sink: listing lingering transactions: %w", err)
	}
	for _, id := range ids {
		if err := c.fence(id); err != nil {
			return err
		}
	}
	if len(ids) > 0 {
		c.log.Info("aborted lingering transactions", zap.Strings("ids", ids))
	}
	return nil
}

// parseTxnID splits prefix-subtask-checkpoint.
func parseTxnID(prefix, id string) (sub int, ckpt uint64, ok bool) {
	rest, found := strings.CutPrefix(id, prefix+"-")
	if !found {
		return 0, 0, false
	}
	s, k, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	sub, err := strconv.Atoi(s)
	if err != nil || sub < 0 {
		return 0, 0, false
	}
	ckpt, err = strconv.ParseUint(k, 10, 64)
	return sub, ckpt, err == nil
}

// adminRetries is how often an admin client retries a request itself
// (kgo's default is 20): endTxn retries with a fresh client instead, which
// finds a coordinator that moved.
const adminRetries = 3

func (c *committer[T]) newAdminClient() (*kgo.Client, error) {
	return c.newClient(kgo.RequestRetries(adminRetries))
}

// withAdmin runs fn with a client for requests that name transactions
// themselves; after Close (commits at the end of the job) a temporary one.
func (c *committer[T]) withAdmin(fn func(ctx context.Context, cl *kgo.Client) error) error {
	ctx, cancel := c.requestCtx()
	defer cancel()
	if c.closed {
		cl, err := c.newAdminClient()
		if err != nil {
			return err
		}
		defer cl.Close()
		return fn(ctx, cl)
	}
	if c.admin == nil {
		cl, err := c.newAdminClient()
		if err != nil {
			return err
		}
		c.admin = cl
	}
	return fn(ctx, c.admin)
}

// freshAdmin replaces the client withAdmin hands out by a new one (its
// coordinators and brokers looked up again). After Close it returns an
// error: withAdmin's temporary client is then new anyway.
func (c *committer[T]) freshAdmin() (*kgo.Client, error) {
	if c.closed {
		return nil, errors.New("kafka: sink closed")
	}
	cl, err := c.newAdminClient()
	if err != nil {
		return nil, err
	}
	if c.admin != nil {
		c.admin.Close()
	}
	c.admin = cl
	return cl, nil
}

// Close releases the clients. None flushes first, unless the sink failed.
func (c *committer[T]) Close() error {
	c.closed = true
	var err error
	if c.cl != nil {
		if c.cfg.Guarantee == None && !c.failed {
			ctx, cancel := c.requestCtx()
			if ferr := c.cl.Flush(ctx); ferr != nil {
				err = fmt.Errorf("kafka: sink: flush: %w", ferr)
			} else {
				err = c.deliveryErr()
			}
			cancel()
		}
		c.cl.Close()
		c.cl = nil
	}
	if c.admin != nil {
		c.admin.Close()
		c.admin = nil
	}
	return err
}
