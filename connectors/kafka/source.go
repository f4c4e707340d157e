package kafka

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
)

// StartOffset says where the source starts reading a partition it has no
// checkpointed offset for, at the job's first start. Partitions that
// appear later (discovered while the job runs, or after the checkpoint
// the job restores) are read from their earliest offset.
type StartOffset struct {
	kind     startKind
	millis   int64
	fallback *StartOffset
}

type startKind uint8

const (
	earliest startKind = iota
	latest
	atTime
	committed
)

// Earliest starts at the first offset still in the log (the default).
func Earliest() StartOffset { return StartOffset{kind: earliest} }

// Latest starts after the last record written before the job started.
func Latest() StartOffset { return StartOffset{kind: latest} }

// AtTime starts at the first record with a timestamp at or after t (the
// end of the partition if there is none).
func AtTime(t time.Time) StartOffset { return StartOffset{kind: atTime, millis: t.UnixMilli()} }

// CommittedOffsets starts at the offsets the consumer group
// (SourceConfig.Group) committed, and where it committed none, at
// fallback.
func CommittedOffsets(fallback StartOffset) StartOffset {
	if fallback.kind == committed {
		fallback = *fallback.fallback
	}
	return StartOffset{kind: committed, fallback: &fallback}
}

// SourceConfig configures Source. Zero values mean the documented
// defaults.
type SourceConfig[T any] struct {
	// Brokers are the seed brokers, host:port (required).
	Brokers []string
	// Topics to read; or TopicPattern, a regular expression every topic
	// read must match. Exactly one of them.
	Topics       []string
	TopicPattern string
	// Deserializer turns a record into a value (required). See Values.
	Deserializer func(r *kgo.Record) (T, error)
	// SkipBadRecords makes the source skip a record the deserializer
	// rejects, log it and count it in Skipped (if set). By default such a
	// record fails the job, naming its topic, partition and offset.
	SkipBadRecords bool
	Skipped        *atomic.Int64
	// Start is where partitions without a checkpointed offset start
	// (default Earliest).
	Start StartOffset
	// Bounded makes the source stop at the end offsets the partitions had
	// when it first started (kept in the checkpoints too), so the job
	// ends. It excludes DiscoveryInterval.
	Bounded bool
	// Group is the consumer group for CommittedOffsets and CommitOffsets.
	// The source never joins it: partitions are assigned by the job.
	Group string
	// CommitOffsets commits the offsets of every completed checkpoint to
	// Group, for monitoring (the job itself restores from its checkpoints).
	CommitOffsets bool
	// Watermarks is the event-time strategy, applied per partition; its
	// timestamp function may be nil to use the record timestamps (e.g.
	// weir.BoundedOutOfOrderness[T](bound, nil).WithIdleness(d)). Default:
	// record timestamps, no watermarks.
	Watermarks *weir.WatermarkStrategy[T]
	// DiscoveryInterval is how often the source looks for new partitions
	// and topics (0: only at start).
	DiscoveryInterval time.Duration
	// ReadUncommitted also reads records of transactions not committed
	// (yet); by default only committed records are read.
	ReadUncommitted bool
	// RequestTimeout bounds the lookups at start (metadata, offsets), so
	// that unreachable brokers fail the job instead of hanging it
	// (default 30s).
	RequestTimeout time.Duration
	// ClientOptions are passed to the franz-go client last (TLS, SASL,
	// fetch sizes). They must not set a consumer group or topics.
	ClientOptions []kgo.Opt
	// Logger (default: the job's).
	Logger *zap.Logger
}

// Values returns a Deserializer that decodes record values with fn.
func Values[T any](fn func(value []byte) (T, error)) func(*kgo.Record) (T, error) {
	return func(r *kgo.Record) (T, error) { return fn(r.Value) }
}

// Validate reports the first invalid setting.
func (c *SourceConfig[T]) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafka: source: no brokers")
	case (len(c.Topics) == 0) == (c.TopicPattern == ""):
		return errors.New("kafka: source: set exactly one of Topics and TopicPattern")
	case c.Deserializer == nil:
		return errors.New("kafka: source: no deserializer")
	case c.Bounded && c.DiscoveryInterval != 0:
		return errors.New("kafka: source: a bounded source does not discover partitions (DiscoveryInterval must be 0)")
	case c.DiscoveryInterval < 0:
		return fmt.Errorf("kafka: source: negative discovery interval %v", c.DiscoveryInterval)
	case c.RequestTimeout < 0:
		return fmt.Errorf("kafka: source: negative request timeout %v", c.RequestTimeout)
	case (c.Start.kind == committed || c.CommitOffsets) && c.Group == "":
		return errors.New("kafka: source: committed offsets need a Group")
	}
	if c.TopicPattern != "" {
		if _, err := regexp.Compile(c.TopicPattern); err != nil {
			return fmt.Errorf("kafka: source: topic pattern: %w", err)
		}
	}
	for _, t := range c.Topics {
		if t == "" {
			return errors.New("kafka: source: empty topic name")
		}
	}
	return nil
}

// Source returns the records of the configured topics as a timestamped
// stream (see the package doc). Bad configuration is reported by Execute.
func Source[T any](env *weir.Environment, cfg SourceConfig[T]) *weir.Stream[T] {
	verr := cfg.Validate()
	if verr != nil {
		env.ReportError(verr)
	}
	if cfg.Logger == nil {
		cfg.Logger = env.Logger()
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	strategy := cfg.Watermarks
	if strategy == nil {
		strategy = weir.NoWatermarks[T](nil)
	}
	name := "kafka source " + strings.Join(cfg.Topics, ",") + cfg.TopicPattern
	var pattern *regexp.Regexp
	if cfg.TopicPattern != "" {
		// Validate reports a pattern that does not compile (Execute
		// then fails and this source never runs); should it not have,
		// the error is reported here, never dropped.
		var err error
		if pattern, err = regexp.Compile(cfg.TopicPattern); err != nil && verr == nil {
			env.ReportError(fmt.Errorf("kafka: source: topic pattern: %w", err))
		}
	}
	return weir.FromSplitReader(env, name, strategy, func(sub, par int) (weir.SplitReader[T], error) {
		return &reader[T]{cfg: &cfg, pattern: pattern, sub: sub, par: par,
			log:   cfg.Logger.With(zap.String("source", name), zap.Int("subtask", sub)),
			parts: map[tp]*partition{}, ready: make(chan struct{}, 1), commitReady: make(chan struct{}, 1)}, nil
	})
}

// tp is a topic partition.
type tp struct {
	topic     string
	partition int32
}

func (t tp) String() string { return fmt.Sprintf("%s-%d", t.topic, t.partition) }

// owner is the subtask of par that reads t: partitions of a topic go
// round robin from a subtask chosen by the topic's hash (as Flink's
// KafkaSourceEnumerator does), so every attempt agrees.
func owner(t tp, par int) int {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(t.topic); i++ {
		h ^= uint32(t.topic[i])
		h *= 16777619
	}
	return int((uint64(h%uint32(par)) + uint64(t.partition)) % uint64(par))
}

// partition is one partition a subtask reads.
type partition struct {
	tp
	topicID kadm.TopicID // all zero: unknown (a broker without topic IDs, a version-1 position)
	id      string       // split id
	next    int64        // offset of the next record to read
	stop    int64        // bounded: read up to, excluding; noStop otherwise
	done    bool         // read to stop

	// Backlog: records fetched but not read yet, and the end of the log
	// as the last fetch saw it (-1: unknown).
	pending int
	end     int64
	backlog bool // as told to the splits register
}

const noStop = -1

// reader reads a subtask's partitions. Its fields belong to the task's
// goroutine, except mu's, shared with the fetch waiter, the discovery and
// the group committer goroutines.
type reader[T any] struct {
	cfg      *SourceConfig[T]
	pattern  *regexp.Regexp
	sub, par int
	log      *zap.Logger

	// From Seek or Rescale, before Start.
	restored        map[tp]*partition
	restoredStarted bool

	cl      *kgo.Client
	adm     *kadm.Client
	splits  *weir.Splits
	parts   map[tp]*partition // every owned partition, finished ones too
	active  int               // not done
	finish  []*partition      // done, their splits to remove
	batch   []*kgo.Record
	bi      int
	last    *partition // of the previous record
	waiting bool       // a fetch waiter runs

	ctx         context.Context // of the background goroutines
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	ready       chan struct{} // buffered(1): fetched, or partitions found
	commitReady chan struct{} // buffered(1): an offset commit is pending
	mu          struct {
		sync.Mutex
		fetches kgo.Fetches
		fetched bool         // the waiter stored fetches
		found   []*partition // discovered, not added yet
		commit  kadm.Offsets // pending group commit
	}
}

// pollRecords is the most records taken from the client at once.
const pollRecords = 4096

func (r *reader[T]) Start(splits *weir.Splits) error {
	r.splits = splits
	opts := []kgo.Opt{kgo.SeedBrokers(r.cfg.Brokers...), kgo.KeepControlRecords()}
	if !r.cfg.ReadUncommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(append(opts, r.cfg.ClientOptions...)...)
	if err != nil {
		return fmt.Errorf("kafka: source client: %w", err)
	}
	r.cl, r.adm = cl, kadm.NewClient(cl)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.RequestTimeout)
	defer cancel()
	owned, ids, err := r.lookup(ctx)
	if err != nil {
		return err
	}
	for _, p := range r.restored {
		if now := ids[p.topic]; p.topicID != (kadm.TopicID{}) && now != (kadm.TopicID{}) && now != p.topicID {
			// Deleted and created again under its name: its offsets are
			// of other records now.
			return fmt.Errorf("%w: kafka: source: topic %q has ID %s, but the restored offsets are of the topic of that name with ID %s "+
				"(deleted and created again), which would be read as offsets of other records: give the source a new UID "+
				"(it starts from its Start; restore WithAllowNonRestoredState(true) to drop the old offsets)", weir.ErrSourceChanged,
				p.topic, now, p.topicID)
		}
	}
	var fresh []tp
	for _, t := range owned {
		if p := r.restored[t]; p != nil {
			p.topicID = ids[t.topic]
			r.parts[t] = p
		} else {
			fresh = append(fresh, t)
		}
	}
	for t := range r.restored {
		if r.parts[t] == nil {
			r.log.Warn("a partition of the restored checkpoint no longer exists; dropping it", zap.Stringer("partition", t))
		}
	}
	start := r.cfg.Start
	if r.restoredStarted {
		start = Earliest() // new since the checkpoint
	}
	offs, err := r.resolve(ctx, start, fresh)
	if err != nil {
		return err
	}
	for _, t := range fresh {
		r.parts[t] = &partition{tp: t, topicID: ids[t.topic], next: offs[t], stop: noStop, end: -1}
	}
	if r.cfg.Bounded {
		if err := r.resolveStops(ctx); err != nil {
			return err
		}
	}
	r.addPartitions(owned)
	if r.cfg.DiscoveryInterval > 0 {
		known := make(map[tp]bool, len(owned))
		for _, t := range owned {
			known[t] = true
		}
		r.wg.Go(func() { r.discover(known) })
	}
	if r.cfg.CommitOffsets {
		r.wg.Go(r.commitLoop)
	}
	return nil
}

// addPartitions starts reading the partitions ts of r.parts.
func (r *reader[T]) addPartitions(ts []tp) {
	consume := map[string]map[int32]kgo.Offset{}
	for _, t := range ts {
		p := r.parts[t]
		p.id = t.String()
		if p.stop != noStop && p.next >= p.stop {
			p.done = true
			continue
		}
		r.active++
		r.splits.Add(p.id)
		if consume[t.topic] == nil {
			consume[t.topic] = map[int32]kgo.Offset{}
		}
		consume[t.topic][t.partition] = kgo.NewOffset().At(p.next)
	}
	if len(consume) > 0 {
		r.cl.AddConsumePartitions(consume)
	}
}

// lookup returns the partitions of the configured topics this subtask
// owns, sorted, and the topics' IDs.
func (r *reader[T]) lookup(ctx context.Context) ([]tp, map[string]kadm.TopicID, error) {
	tds, err := r.adm.ListTopics(ctx, r.cfg.Topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: looking up topics at %v: %w", r.cfg.Brokers, err)
	}
	var owned []tp
	ids := map[string]kadm.TopicID{}
	for name, td := range tds {
		if r.pattern != nil && (td.IsInternal || !r.pattern.MatchString(name)) {
			continue
		}
		if td.Err != nil {
			if errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
				return nil, nil, fmt.Errorf("kafka: topic %q does not exist", name)
			}
			return nil, nil, fmt.Errorf("kafka: topic %q: %w", name, td.Err)
		}
		ids[name] = td.ID
		for p := range td.Partitions {
			if t := (tp{name, p}); owner(t, r.par) == r.sub {
				owned = append(owned, t)
			}
		}
	}
	for _, name := range r.cfg.Topics {
		if _, ok := tds[name]; !ok {
			return nil, nil, fmt.Errorf("kafka: topic %q does not exist", name)
		}
	}
	slices.SortFunc(owned, func(a, b tp) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	return owned, ids, nil
}

func topicsOf(ts []tp) []string {
	var names []string
	for _, t := range ts {
		if !slices.Contains(names, t.topic) {
			names = append(names, t.topic)
		}
	}
	return names
}

// resolve turns start into an offset for each partition of ts.
func (r *reader[T]) resolve(ctx context.Context, start StartOffset, ts []tp) (map[tp]int64, error) {
	offs := map[tp]int64{}
	if len(ts) == 0 {
		return offs, nil
	}
	topics := topicsOf(ts)
	if start.kind == committed {
		resp, err := r.adm.FetchOffsetsForTopics(ctx, r.cfg.Group, topics...)
		if err != nil {
			return nil, fmt.Errorf("kafka: fetching the offsets of group %q: %w", r.cfg.Group, err)
		}
		var rest []tp
		for _, t := range ts {
			if o, ok := resp.Lookup(t.topic, t.partition); ok && o.Err == nil && o.At >= 0 {
				offs[t] = o.At
			} else {
				rest = append(rest, t)
			}
		}
		more, err := r.resolve(ctx, *start.fallback, rest)
		for t, o := range more {
			offs[t] = o
		}
		return offs, err
	}
	var listed kadm.ListedOffsets
	var err error
	switch start.kind {
	case earliest:
		listed, err = r.adm.ListStartOffsets(ctx, topics...)
	case latest:
		listed, err = r.listEnd(ctx, topics)
	case atTime:
		listed, err = r.adm.ListOffsetsAfterMilli(ctx, start.millis, topics...)
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: listing offsets of %v: %w", topics, err)
	}
	for _, t := range ts {
		o, ok := listed.Lookup(t.topic, t.partition)
		switch {
		case !ok:
			return nil, fmt.Errorf("kafka: no offset listed for %v", t)
		case o.Err != nil:
			return nil, fmt.Errorf("kafka: listing the offset of %v: %w", t, o.Err)
		}
		offs[t] = max(o.Offset, 0)
	}
	return offs, nil
}

// listEnd lists the end offsets a consumer of this isolation level sees.
func (r *reader[T]) listEnd(ctx context.Context, topics []string) (kadm.ListedOffsets, error) {
	if r.cfg.ReadUncommitted {
		return r.adm.ListEndOffsets(ctx, topics...)
	}
	return r.adm.ListCommittedOffsets(ctx, topics...)
}

// resolveStops sets the stop offset of partitions that have none: their
// end now.
func (r *reader[T]) resolveStops(ctx context.Context) error {
	var ts []tp
	for t, p := range r.parts {
		if p.stop == noStop {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	listed, err := r.listEnd(ctx, topicsOf(ts))
	if err != nil {
		return fmt.Errorf("kafka: listing end offsets: %w", err)
	}
	for _, t := range ts {
		o, ok := listed.Lookup(t.topic, t.partition)
		if !ok || o.Err != nil {
			return fmt.Errorf("kafka: listing the end offset of %v: %v", t, o.Err)
		}
		r.parts[t].stop = o.Offset
	}
	return nil
}

func (r *reader[T]) Poll() (weir.SplitRecord[T], weir.ReadStatus, error) {
	var zero weir.SplitRecord[T]
	r.removeFinished()
	for {
		for r.bi < len(r.batch) {
			rec := r.batch[r.bi]
			r.batch[r.bi] = nil
			r.bi++
			p := r.last
			if p == nil || p.partition != rec.Partition || p.topic != rec.Topic {
				p = r.parts[tp{rec.Topic, rec.Partition}]
				r.last = p
			}
			if p == nil {
				continue // not ours (any more)
			}
			p.pending--
			if p.done || rec.Offset < p.next {
				r.updateBacklog(p)
				continue // finished, or seen
			}
			if p.stop != noStop && rec.Offset >= p.stop {
				r.done(p)
				continue
			}
			p.next = rec.Offset + 1
			r.updateBacklog(p)
			end := p.stop != noStop && p.next >= p.stop
			if end {
				r.done(p) // its split goes at the next poll, after this record
			}
			if rec.Attrs.IsControl() {
				continue // a transaction marker
			}
			v, err := r.cfg.Deserializer(rec)
			if err != nil {
				err = fmt.Errorf("kafka: topic %s partition %d offset %d: deserializing: %w", rec.Topic, rec.Partition, rec.Offset, err)
				if !r.cfg.SkipBadRecords {
					return zero, weir.EndOfInput, err
				}
				if r.cfg.Skipped != nil {
					r.cfg.Skipped.Add(1)
				}
				r.log.Warn("skipping a record", zap.Error(err))
				continue
			}
			return weir.SplitRecord[T]{Value: v, Split: p.id, Timestamp: rec.Timestamp.UnixMilli()}, weir.Read, nil
		}
		r.batch, r.bi = r.batch[:0], 0
		r.removeFinished()
		r.addFound()
		if r.cfg.Bounded && r.active == 0 {
			return zero, weir.EndOfInput, nil
		}
		fs, ok := r.fetched()
		if !ok {
			return zero, weir.NothingAvailable, nil
		}
		if err := r.take(fs); err != nil {
			return zero, weir.EndOfInput, err
		}
		if len(r.batch) == 0 {
			return zero, weir.NothingAvailable, nil
		}
	}
}

func (r *reader[T]) done(p *partition) {
	p.done = true
	r.active--
	r.finish = append(r.finish, p)
	r.cl.RemoveConsumePartitions(map[string][]int32{p.topic: {p.partition}})
}

func (r *reader[T]) removeFinished() {
	for _, p := range r.finish {
		r.splits.Remove(p.id)
	}
	r.finish = r.finish[:0]
}

// fetched returns what the waiter fetched, or, if none runs, what the
// client has buffered now; ok is false while the waiter still waits.
func (r *reader[T]) fetched() (kgo.Fetches, bool) {
	if !r.waiting {
		return r.cl.PollRecords(nil, pollRecords), true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mu.fetched {
		return nil, false
	}
	fs := r.mu.fetches
	r.mu.fetches, r.mu.fetched = nil, false
	r.waiting = false
	return fs, true
}

// take puts the records of fs into the batch. A fetch error fails the
// source, except data loss that skips records (logged: the broker no
// longer has them); data loss that rewinds the client fails it too.
func (r *reader[T]) take(fs kgo.Fetches) error {
	var err error
	fs.EachError(func(topic string, part int32, e error) {
		var loss *kgo.ErrDataLoss
		switch {
		case errors.Is(e, context.Canceled), errors.Is(e, kgo.ErrClientClosed):
		case errors.As(e, &loss) && loss.ResetTo < loss.ConsumedTo:
			// The client would read again offsets the job has read: the
			// task fails and the job restores the checkpointed offsets
			// rather than count those records twice.
			if err == nil {
				err = fmt.Errorf("kafka: topic %s partition %d: the client was reset from offset %d back to %d (log truncated or leader changed): %w",
					topic, part, loss.ConsumedTo, loss.ResetTo, e)
			}
		case errors.As(e, &loss):
			r.log.Warn("data loss: the broker no longer has the offset to read", zap.Error(e))
		case err == nil:
			err = fmt.Errorf("kafka: fetching topic %s partition %d: %w", topic, part, e)
		}
	})
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		p := r.parts[tp{fp.Topic, fp.Partition}]
		if p == nil {
			return
		}
		if fp.Err == nil {
			p.end = fp.HighWatermark
			if !r.cfg.ReadUncommitted {
				p.end = fp.LastStableOffset
			}
		}
		p.pending += len(fp.Records)
		r.batch = append(r.batch, fp.Records...)
		r.updateBacklog(p)
	})
	return err
}

// updateBacklog tells the splits register whether p has records to read,
// so that p does not turn idle while it waits its turn.
func (r *reader[T]) updateBacklog(p *partition) {
	b := !p.done && (p.pending > 0 || (p.end >= 0 && p.next < p.end))
	if b != p.backlog {
		p.backlog = b
		r.splits.SetBacklog(p.id, b)
	}
}

// Available starts a waiter that blocks in the client until records come;
// discovered partitions wake the task too.
func (r *reader[T]) Available() <-chan struct{} {
	if !r.waiting {
		r.waiting = true
		r.wg.Go(func() {
			fs := r.cl.PollRecords(r.ctx, pollRecords)
			r.mu.Lock()
			r.mu.fetches, r.mu.fetched = fs, true
			r.mu.Unlock()
			signal(r.ready)
		})
	}
	return r.ready
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// discover looks for new partitions every interval and hands those this
// subtask owns to the task, starting at their earliest offset.
func (r *reader[T]) discover(known map[tp]bool) {
	t := time.NewTicker(r.cfg.DiscoveryInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.RequestTimeout)
		owned, ids, err := r.lookup(ctx)
		var fresh []tp
		for _, p := range owned {
			if !known[p] {
				fresh = append(fresh, p)
			}
		}
		var offs map[tp]int64
		if err == nil {
			offs, err = r.resolve(ctx, Earliest(), fresh)
		}
		cancel()
		if err != nil {
			if r.ctx.Err() == nil {
				r.log.Warn("partition discovery failed; retrying at the next interval", zap.Error(err))
			}
			continue
		}
		if len(fresh) == 0 {
			continue
		}
		r.mu.Lock()
		for _, p := range fresh {
			known[p] = true
			r.mu.found = append(r.mu.found, &partition{tp: p, topicID: ids[p.topic], next: offs[p], stop: noStop, end: -1})
		}
		r.mu.Unlock()
		r.log.Info("discovered partitions", zap.Int("count", len(fresh)))
		signal(r.ready)
	}
}

func (r *reader[T]) addFound() {
	r.mu.Lock()
	found := r.mu.found
	r.mu.found = nil
	r.mu.Unlock()
	var ts []tp
	for _, p := range found {
		if r.parts[p.tp] == nil {
			r.parts[p.tp] = p
			ts = append(ts, p.tp)
		}
	}
	if len(ts) > 0 {
		r.addPartitions(ts)
	}
}

// Close stops the background goroutines and the client.
func (r *reader[T]) Close() error {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	if r.cl != nil {
		r.cl.Close()
	}
	return nil
}
