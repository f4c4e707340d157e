package ha

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/weirstream/weir/barrier"
)

// Defaults of Config fields left zero.
const (
	DefaultElectionTimeout = 5 * time.Second
	DefaultDialTimeout     = 5 * time.Second
	// DefaultRequestTimeout bounds each read and write of the record.
	DefaultRequestTimeout = 3 * time.Second
)

// Errors of the package.
var (
	// ErrLeadershipLost: the leader's term ended (its lease expired or was
	// revoked, another coordinator leads, or etcd could not confirm a
	// write): it must stop acting for the job.
	ErrLeadershipLost = errors.New("ha: leadership lost")
	// ErrUnreachable: etcd did not answer.
	ErrUnreachable = errors.New("ha: etcd unreachable")
	// ErrCorruptRecord: a key of the job's record does not parse.
	ErrCorruptRecord = errors.New("ha: corrupt record in etcd")
	// ErrJobEnded: the job's end is recorded and no coordinator leads it;
	// none will again.
	ErrJobEnded = errors.New("ha: job ended")
)

// Config says where the job's record lives.
type Config struct {
	// Endpoints are etcd's client URLs or host:port addresses (required).
	Endpoints []string
	// JobID names the job; every key of its record has it (required:
	// letters, digits, '.', '_' and '-').
	JobID string
	// ElectionTimeout is the leader's lease: a leader that stops renewing
	// it (killed, partitioned) is replaced this long after its last renewal
	// (default 5 s; whole seconds, at least 1 s).
	ElectionTimeout time.Duration
	// DialTimeout bounds the first contact with etcd (default 5 s).
	DialTimeout time.Duration
	// RequestTimeout bounds each read and write (default 3 s).
	RequestTimeout time.Duration
	// TLS, if set, secures the connection to etcd.
	TLS *tls.Config
	// Username and Password authenticate to etcd, if set.
	Username, Password string
	// Logger receives election events (nil: no logging).
	Logger *zap.Logger
}

var jobIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	switch {
	case len(c.Endpoints) == 0:
		return errors.New("ha: no etcd Endpoints")
	case !jobIDPattern.MatchString(c.JobID):
		return fmt.Errorf("ha: JobID %q: want 1 to 128 letters, digits, '.', '_' or '-'", c.JobID)
	case c.ElectionTimeout < 0 || c.DialTimeout < 0 || c.RequestTimeout < 0:
		return errors.New("ha: negative timeout")
	case c.ElectionTimeout > 0 && (c.ElectionTimeout < time.Second || c.ElectionTimeout%time.Second != 0):
		return fmt.Errorf("ha: ElectionTimeout %v: want whole seconds, at least 1 s", c.ElectionTimeout)
	}
	for _, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			return errors.New("ha: empty etcd endpoint")
		}
	}
	return nil
}

func (c *Config) ensureDefaults() {
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// keys of one job's record.
type keys struct {
	prefix, election, counter, pointer, status string
}

func keysOf(job string) keys {
	p := "/weir/jobs/" + job + "/"
	return keys{prefix: p, election: p + "leader", counter: p + "counter", pointer: p + "checkpoint", status: p + "status"}
}

// Client is a connection to etcd for one job.
type Client struct {
	cfg  Config
	cli  *clientv3.Client
	keys keys
	log  *zap.Logger
}

// Dial connects to etcd and reads the job's record once, so that an
// unreachable etcd is an error here (wrapping ErrUnreachable) rather than
// a hang later.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ensureDefaults()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         cfg.TLS,
		Username:    cfg.Username,
		Password:    cfg.Password,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
		// A lost etcd connection is noticed within seconds, and one that
		// returns is reconnected within a second.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, strings.Join(cfg.Endpoints, ","), err)
	}
	c := &Client{cfg: cfg, cli: cli, keys: keysOf(cfg.JobID), log: cfg.Logger.With(zap.String("job", cfg.JobID))}
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, c.keys.status); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w at %s (within %v): %w", ErrUnreachable, strings.Join(cfg.Endpoints, ","), cfg.DialTimeout, err)
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cli.Close() }

// JobID is the job the client serves.
func (c *Client) JobID() string { return c.cfg.JobID }

// ElectionTimeout is the leaders' lease.
func (c *Client) ElectionTimeout() time.Duration { return c.cfg.ElectionTimeout }

// Leader names a leader: its coordinator's ID and control address, and
// its epoch.
type Leader struct {
	ID    string `json:"ID"`
	Addr  string `json:"Addr"`
	Epoch uint64 `json:"-"`
}

// Pointer is the latest completed checkpoint in the record.
type Pointer struct {
	ID barrier.CheckpointID `json:"ID"`
	// Epoch is the leader that completed it; Prev the pointer before (0:
	// none).
	Epoch uint64               `json:"Epoch"`
	Prev  barrier.CheckpointID `json:"Prev,omitempty"`
}

// Status is how the job ended.
type Status struct {
	Finished bool   `json:"Finished"`
	Error    string `json:"Error,omitempty"` // why it failed, unless Finished
}

// Record is what a new leader reads.
type Record struct {
	// Counter is the highest checkpoint ID any leader may have triggered.
	Counter barrier.CheckpointID
	// Pointer is the latest completed checkpoint (nil: none yet).
	Pointer *Pointer
	// Status is set once the job ended.
	Status *Status
}

func (c *Client) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// Read reads the job's record.
func (c *Client) Read(ctx context.Context) (Record, error) {
	rctx, cancel := c.reqCtx(ctx)
	defer cancel()
	resp, err := c.cli.Txn(rctx).Then(clientv3.OpGet(c.keys.counter), clientv3.OpGet(c.keys.pointer), clientv3.OpGet(c.keys.status)).Commit()
	if err != nil {
		return Record{}, fmt.Errorf("ha: reading job %s: %w", c.cfg.JobID, err)
	}
	var r Record
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		n, err := strconv.ParseUint(string(kvs[0].Value), 10, 64)
		if err != nil {
			return Record{}, fmt.Errorf("%w: %s: %q", ErrCorruptRecord, c.keys.counter, kvs[0].Value)
		}
		r.Counter = barrier.CheckpointID(n)
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		var p Pointer
		if err := json.Unmarshal(kvs[0].Value, &p); err != nil || p.ID == 0 {
			return Record{}, fmt.Errorf("%w: %s: %q", ErrCorruptRecord, c.keys.pointer, kvs[0].Value)
		}
		r.Pointer = &p
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		var s Status
		if err := json.Unmarshal(kvs[0].Value, &s); err != nil {
			return Record{}, fmt.Errorf("%w: %s: %q", ErrCorruptRecord, c.keys.status, kvs[0].Value)
		}
		r.Status = &s
	}
	return r, nil
}

// PointerKey is the key of the checkpoint pointer (for messages).
func (c *Client) PointerKey() string { return c.keys.pointer }

// CurrentLeader returns the current leader, or ok false if there is none.
func (c *Client) CurrentLeader(ctx context.Context) (l Leader, ok bool, err error) {
	rctx, cancel := c.reqCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(rctx, c.keys.election+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return Leader{}, false, fmt.Errorf("ha: looking up the leader of job %s: %w", c.cfg.JobID, err)
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, false, nil
	}
	kv := resp.Kvs[0]
	if err := json.Unmarshal(kv.Value, &l); err != nil {
		return Leader{}, false, fmt.Errorf("%w: %s: %q", ErrCorruptRecord, kv.Key, kv.Value)
	}
	l.Epoch = uint64(kv.CreateRevision)
	return l, true, nil
}

// WaitLeader waits until the job has a leader and returns it, or returns
// ErrJobEnded once the job's end is recorded while no coordinator leads
// it: a leader records the end before it stops its workers, but one that
// loses its term in between, or whose record fails, stops them without
// it; a worker that looked for the end then would otherwise wait for a
// leader that never comes. It retries while etcd is unreachable, until
// ctx ends.
func (c *Client) WaitLeader(ctx context.Context) (Leader, error) {
	delay := 50 * time.Millisecond
	for {
		wctx, cancel := context.WithCancel(ctx)
		// Watch before the reads, so no election or end between them is
		// missed; the prefix covers both the election and the status key.
		wch := c.cli.Watch(clientv3.WithRequireLeader(wctx), c.keys.prefix, clientv3.WithPrefix())
		l, ok, err := c.CurrentLeader(ctx)
		if err == nil && ok {
			cancel()
			return l, nil
		}
		var ended bool
		if err == nil {
			ended, err = c.ended(ctx)
		}
		if err == nil && ended {
			cancel()
			return Leader{}, fmt.Errorf("%w: %s", ErrJobEnded, c.cfg.JobID)
		}
		if err != nil {
			c.log.Debug("leader look-up failed", zap.Error(err))
			cancel()
			if !sleep(ctx, delay) {
				return Leader{}, ctx.Err()
			}
			delay = min(2*delay, time.Second)
			continue
		}
		select {
		case <-wch:
		case <-ctx.Done():
		}
		cancel()
		if ctx.Err() != nil {
			return Leader{}, ctx.Err()
		}
	}
}

// ended reports whether the job's end is recorded.
func (c *Client) ended(ctx context.Context) (bool, error) {
	rctx, cancel := c.reqCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(rctx, c.keys.status, clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("ha: reading the status of job %s: %w", c.cfg.JobID, err)
	}
	return resp.Count > 0, nil
}

// WatchLeader returns a channel closed once the job's leader is no longer
// the one of epoch (it resigned, its lease ended, or another leads), or
// ctx ended.
func (c *Client) WatchLeader(ctx context.Context, epoch uint64) <-chan struct{} {
	changed := make(chan struct{})
	go func() {
		defer close(changed)
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(ctx)
			wch := c.cli.Watch(clientv3.WithRequireLeader(wctx), c.keys.election+"/", clientv3.WithPrefix())
			l, ok, err := c.CurrentLeader(ctx)
			if err == nil && (!ok || l.Epoch != epoch) {
				cancel()
				return
			}
			if err != nil {
				cancel()
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			select {
			case <-wch:
			case <-ctx.Done():
			}
			cancel()
		}
	}()
	return changed
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Campaign waits until this coordinator leads the job and returns its
// term. id and addr go into the election key for workers. It retries while
// etcd is unreachable, until ctx ends.
func (c *Client) Campaign(ctx context.Context, id, addr string) (*Leadership, error) {
	val, err := json.Marshal(Leader{ID: id, Addr: addr})
	if err != nil {
		return nil, err
	}
	delay := 100 * time.Millisecond
	for {
		l, err := c.campaignOnce(ctx, string(val))
		if err == nil {
			c.log.Info("elected leader", zap.String("id", id), zap.String("addr", addr), zap.Uint64("epoch", l.epoch))
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.log.Warn("campaign failed; retrying", zap.Duration("in", delay), zap.Error(err))
		if !sleep(ctx, delay) {
			return nil, ctx.Err()
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func (c *Client) campaignOnce(ctx context.Context, val string) (*Leadership, error) {
	gctx, cancel := c.reqCtx(ctx)
	lease, err := c.cli.Grant(gctx, int64(c.cfg.ElectionTimeout/time.Second))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ha: granting a lease: %w", err)
	}
	// The session keeps the lease alive until it is closed, or until etcd
	// stops confirming renewals for a whole ElectionTimeout.
	sess, err := concurrency.NewSession(c.cli, concurrency.WithLease(lease.ID),
		concurrency.WithTTL(int(c.cfg.ElectionTimeout/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("ha: opening an etcd session: %w", err)
	}
	el := concurrency.NewElection(sess, c.keys.election)
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		// A session that expires while it waits ends the campaign.
		select {
		case <-sess.Done():
			stop()
		case <-cctx.Done():
		}
	}()
	if err := el.Campaign(cctx, val); err != nil {
		closeSession(sess, c.cfg.RequestTimeout)
		if ctx.Err() == nil && cctx.Err() != nil {
			return nil, errors.New("ha: the etcd session expired while campaigning")
		}
		return nil, fmt.Errorf("ha: campaigning: %w", err)
	}
	l := &Leadership{c: c, sess: sess, el: el, epoch: uint64(el.Rev()), lost: make(chan struct{})}
	l.guard = clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())
	// Campaign returns once the keys before ours are gone, even when ours
	// went with an expired lease: prove the key is still ours.
	if err := l.Check(ctx); err != nil {
		l.Resign()
		return nil, err
	}
	go func() {
		select {
		case <-sess.Done():
			l.stepDown(errors.New("its etcd lease ended"))
		case <-l.lost:
		}
	}()
	return l, nil
}

func closeSession(s *concurrency.Session, timeout time.Duration) {
	// Close revokes the lease, bounded by the session's context; a
	// bounded wait of our own in case etcd is gone.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Close()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.Orphan()
		<-done
	}
}

// Leadership is one term of this coordinator as the job's leader.
type Leadership struct {
	c     *Client
	sess  *concurrency.Session
	el    *concurrency.Election
	epoch uint64
	guard clientv3.Cmp

	once   sync.Once
	lost   chan struct{} // closed when the term ended
	mu     sync.Mutex
	why    error
	resvMu sync.Mutex
	resv   barrier.CheckpointID // highest ID reserved in this term
}

// Epoch is the term's epoch: the election key's creation revision.
func (l *Leadership) Epoch() uint64 { return l.epoch }

// Lost is closed when the term ended.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// Err says why the term ended (nil while it lasts); it wraps
// ErrLeadershipLost.
func (l *Leadership) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.why
}

func (l *Leadership) stepDown(why error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.why = fmt.Errorf("%w (epoch %d): %w", ErrLeadershipLost, l.epoch, why)
		l.mu.Unlock()
		if why == errResigned {
			// A normal end (the job ended, or the coordinator stops).
			l.c.log.Info("stepping down as leader: resigned", zap.Uint64("epoch", l.epoch))
		} else {
			l.c.log.Warn("stepping down as leader", zap.Uint64("epoch", l.epoch), zap.Error(why))
		}
		close(l.lost)
	})
}

// txn runs ops only while this term lasts. A transaction that fails or
// cannot be confirmed ends the term: the leader cannot prove it still
// leads.
func (l *Leadership) txn(ctx context.Context, what string, ops ...clientv3.Op) error {
	if err := l.Err(); err != nil {
		return err
	}
	rctx, cancel := l.c.reqCtx(ctx)
	defer cancel()
	resp, err := l.c.cli.Txn(rctx).If(l.guard).Then(ops...).Commit()
	switch {
	case err != nil:
		l.stepDown(fmt.Errorf("%s: etcd did not confirm: %w", what, err))
	case !resp.Succeeded:
		l.stepDown(fmt.Errorf("%s: the election key is no longer ours", what))
	default:
		return nil
	}
	return l.Err()
}

// Check proves the term still lasts.
func (l *Leadership) Check(ctx context.Context) error { return l.txn(ctx, "checking leadership") }

// Reserve records that checkpoint id may be triggered: a later leader
// continues after it.
func (l *Leadership) Reserve(ctx context.Context, id barrier.CheckpointID) error {
	l.resvMu.Lock()
	defer l.resvMu.Unlock()
	if id <= l.resv {
		return l.Err()
	}
	if err := l.txn(ctx, fmt.Sprintf("reserving checkpoint %d", id), clientv3.OpPut(l.c.keys.counter, strconv.FormatUint(uint64(id), 10))); err != nil {
		return err
	}
	l.resv = id
	return nil
}

// Complete moves the pointer to checkpoint id (prev: the pointer before).
func (l *Leadership) Complete(ctx context.Context, id, prev barrier.CheckpointID) error {
	b, err := json.Marshal(Pointer{ID: id, Epoch: l.epoch, Prev: prev})
	if err != nil {
		return err
	}
	return l.txn(ctx, fmt.Sprintf("completing checkpoint %d", id), clientv3.OpPut(l.c.keys.pointer, string(b)))
}

// End records how the job ended.
func (l *Leadership) End(ctx context.Context, s Status) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return l.txn(ctx, "recording the job's end", clientv3.OpPut(l.c.keys.status, string(b)))
}

var errResigned = errors.New("resigned")

// Resign ends the term and deletes the election key, so another
// coordinator takes over at once.
func (l *Leadership) Resign() {
	l.stepDown(errResigned)
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.RequestTimeout)
	defer cancel()
	_ = l.el.Resign(ctx)
	closeSession(l.sess, l.c.cfg.RequestTimeout)
}
