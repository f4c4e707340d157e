package parquet

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	pq "github.com/parquet-go/parquet-go"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/state/s3"
)

// Defaults of Config.
const (
	DefaultRollSize     = 128 << 20
	DefaultRowGroupSize = 8 << 20
	DefaultMaxOpenParts = 16
	DefaultPartPrefix   = "part"
	DefaultPartSuffix   = ".parquet"
)

// batchLen is how many values a part buffers before it hands them to
// parquet-go's writer in one call (its per-call cost is paid once per
// batch, not per record).
const batchLen = 128

// clockEvery is how many records pass between two looks at the clock for
// Config.RollInterval.
const clockEvery = 64

// Config configures Sink. Zero values mean the documented defaults.
type Config[T any] struct {
	// Dir is the directory the sink writes into (required); it is created
	// if missing. The sink owns it: at startup it removes the hidden
	// part files of earlier runs and attempts it finds there (see the
	// package doc), so two sinks must not share a Dir unless their
	// PartPrefix differs. An s3:// URL ("s3://bucket/prefix") writes to
	// object storage, with the endpoint and credentials of the standard
	// environment (see state/s3.FromURL): part files are multipart
	// uploads completed when their checkpoint completes (see the package
	// doc).
	Dir string
	// Bucket returns the bucket of a value: a relative directory under Dir
	// ("" for Dir itself, "a/b" for nested directories) that its part file
	// lies in. ts is the value's event timestamp in unix milliseconds, or
	// eventtime.NoTimestamp. Default: HourBucket, the hour of the event
	// time in UTC ("2006-01-02--15").
	Bucket func(v T, ts int64) string
	// RollSize rolls a part file (closes it; it is committed with the next
	// checkpoint) once its estimated size reaches it (default 128 MiB).
	RollSize int64
	// RollInterval rolls a part file that has been open this long, checked
	// every 64 records the subtask writes (0: no rolling by time). Part
	// files roll at every checkpoint whatever the settings: a Parquet file
	// is complete only once its footer is written.
	RollInterval time.Duration
	// RowGroupSize is how many bytes of encoded values a part file buffers
	// before it writes them out as a row group (default 8 MiB).
	RowGroupSize int64
	// MaxOpenParts bounds the part files a subtask keeps open, one per
	// bucket it writes to (default 16); a value for another bucket rolls
	// the least recently written one. A subtask's memory is bounded by
	// about MaxOpenParts × RowGroupSize.
	MaxOpenParts int
	// PartPrefix and PartSuffix frame the part files' names (defaults
	// "part" and ".parquet"): <prefix>-<uid>-<subtask>-<counter><suffix>.
	PartPrefix, PartSuffix string
	// WriterOptions are passed to parquet-go's writer after the sink's
	// own (Snappy compression, the page buffer size): compression,
	// dictionary and bloom filter settings, key/value metadata.
	WriterOptions []pq.WriterOption
	// Logger (default: the job's).
	Logger *zap.Logger

	now func() time.Time // the clock for RollInterval (tests)
}

// HourBucket is the default bucket: the hour of ts (unix milliseconds) in
// UTC, formatted as "2006-01-02--15" (Flink's DateTimeBucketAssigner); a
// value without a timestamp goes to the bucket of the current hour.
func HourBucket[T any](_ T, ts int64) string {
	if ts == eventtime.NoTimestamp {
		ts = time.Now().UnixMilli()
	}
	return time.UnixMilli(ts).UTC().Format(hourLayout)
}

const hourLayout = "2006-01-02--15"

// Validate reports the first invalid setting.
func (c *Config[T]) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("parquet: sink: no Dir")
	case c.RollSize < 0, c.RollInterval < 0, c.RowGroupSize < 0, c.MaxOpenParts < 0:
		return errors.New("parquet: sink: negative RollSize, RollInterval, RowGroupSize or MaxOpenParts")
	case strings.ContainsAny(c.PartPrefix, `/\`) || strings.ContainsAny(c.PartSuffix, `/\`):
		return fmt.Errorf("parquet: sink: PartPrefix %q and PartSuffix %q must not contain a path separator", c.PartPrefix, c.PartSuffix)
	case strings.HasPrefix(c.PartPrefix, ".") || strings.HasPrefix(c.PartPrefix, "_"):
		return fmt.Errorf("parquet: sink: PartPrefix %q starts with '.' or '_': readers would skip the committed files", c.PartPrefix)
	}
	return nil
}

func (c *Config[T]) defaults() {
	if c.RollSize == 0 {
		c.RollSize = DefaultRollSize
	}
	if c.RowGroupSize == 0 {
		c.RowGroupSize = DefaultRowGroupSize
	}
	if c.MaxOpenParts == 0 {
		c.MaxOpenParts = DefaultMaxOpenParts
	}
	if c.PartPrefix == "" {
		c.PartPrefix = DefaultPartPrefix
	}
	if c.PartSuffix == "" {
		c.PartSuffix = DefaultPartSuffix
	}
	if c.now == nil {
		c.now = time.Now
	}
}

// Sink writes s as Parquet files into cfg.Dir, exactly once with
// checkpointing (see the package doc). T's schema is parquet-go's for the
// struct (its `parquet:"…"` tags). Bad configuration, a directory that
// cannot be created or written, and a T without a Parquet schema are
// reported by Execute, before any record is read.
func Sink[T any](s *weir.Stream[T], cfg Config[T]) *weir.Sink {
	env := s.Environment()
	if cfg.Logger == nil {
		cfg.Logger = env.Logger()
	}
	cfg.defaults()
	err := cfg.Validate()
	var obj *objects
	if err == nil && s3.IsURL(cfg.Dir) {
		if obj, err = newObjects(cfg.Dir); err == nil {
			env.CheckBeforeRun(obj.check)
		}
	} else if err == nil {
		err = checkDir(cfg.Dir)
	}
	if err == nil {
		err = checkSchema[T](cfg.writerOptions())
	}
	env.ReportError(err)
	_, ckpt := env.Checkpointing()
	name := "parquet sink " + cfg.Dir
	return weir.TwoPhaseCommitSink(s, txnCodec{}, func(sub, par int) (weir.TwoPhaseCommitter[T, *txn], error) {
		if obj == nil {
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				return nil, fmt.Errorf("parquet: sink: %w", err)
			}
		}
		c := &committer[T]{cfg: &cfg, obj: obj, opts: cfg.writerOptions(), sub: sub, par: par, uid: uuid.NewString(),
			parts: map[string]*part[T]{}, dirs: map[string]bool{}, ckpt: ckpt,
			log: cfg.Logger.With(zap.String("sink", name), zap.Int("subtask", sub))}
		if cfg.Bucket == nil {
			c.bucketOf = c.hourBucket
		} else {
			c.bucketOf = cfg.Bucket
		}
		return c, nil
	}).Name(name)
}

func (c *Config[T]) writerOptions() []pq.WriterOption {
	return append([]pq.WriterOption{pq.Compression(&pq.Snappy)}, c.WriterOptions...)
}

// checkDir reports a Dir the sink cannot use: a path through a file, or a
// directory (or its nearest existing parent) that is not writable. It
// creates nothing.
func checkDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("parquet: sink: Dir %s: %w", dir, err)
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) && p != filepath.Dir(p) {
			continue // the first existing ancestor decides
		}
		if err != nil {
			return fmt.Errorf("parquet: sink: Dir %s: %w", dir, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("parquet: sink: Dir %s: %s is not a directory", dir, p)
		}
		if err := writable(p); err != nil {
			return fmt.Errorf("parquet: sink: Dir %s: %s is not writable: %w", dir, p, err)
		}
		return nil
	}
}

// checkSchema reports a T parquet-go cannot write (no struct, no exported
// fields, unsupported field types, clashing column names): NewGenericWriter
// panics on some, and its Write fails on others.
func checkSchema[T any](opts []pq.WriterOption) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parquet: sink: %T has no Parquet schema: %v", *new(T), r)
		}
	}()
	w := pq.NewGenericWriter[T](io.Discard, opts...)
	if _, err := w.Write(make([]T, 1)); err != nil {
		return fmt.Errorf("parquet: sink: %T has no Parquet schema: %w", *new(T), err)
	}
	return w.Close()
}

// txn is one checkpoint's part files of a subtask, by their committed
// paths relative to Dir. Every file the transaction opened is listed from
// the moment it is created, so an abort removes it whatever its state.
type txn struct {
	Files []string
	// Uploads (object storage only) are the files' multipart uploads.
	Uploads []*upload
}

// part is an open part file.
type part[T any] struct {
	bucket string
	rel    string // committed path relative to Dir
	hidden string // absolute path while in progress and pending (local)
	out    partOut
	w      *pq.GenericWriter[T]
	batch  []T
	opened time.Time
	used   uint64 // c.seq when last written: the least recent rolls first
	// groupAt is the writer's size estimate after the last row group:
	// what it estimates beyond is buffered.
	groupAt int64
}

// partOut is where a part file's bytes go: a hidden local file or an
// upload.
type partOut interface {
	io.Writer
	// finish makes what was written durable (fsync and close, or the
	// upload's last part).
	finish() error
	// discard drops the output (its file or upload is removed by the
	// transaction's abort).
	discard()
}

// localPart is a part file in progress on the local file system.
type localPart struct{ *os.File }

func (f localPart) finish() error {
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("parquet: sink: fsync %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("parquet: sink: close %s: %w", f.Name(), err)
	}
	return nil
}

func (f localPart) discard() { f.Close() }

// committer is one subtask's part of the sink (used from its task's
// goroutine only).
type committer[T any] struct {
	cfg      *Config[T]
	obj      *objects // the output on object storage, or nil: the local Dir
	opts     []pq.WriterOption
	log      *zap.Logger
	sub, par int
	uid      string // names this subtask's files in this attempt
	counter  int
	ckpt     bool // the job checkpoints
	bucketOf func(T, int64) string

	cur    *txn
	parts  map[string]*part[T] // open parts of cur, by bucket
	last   *part[T]            // the part the last value went to
	seq    uint64              // records written
	free   []*pq.GenericWriter[T]
	dirs   map[string]bool // bucket directories known to exist
	synced []string        // directories of cur's files, to fsync at the pre-commit

	// hourBucket's cache: the bucket of [hourStart, hourStart+1h).
	hourStart int64
	hourName  string

	begun, cleaned, closed bool
}

func (c *committer[T]) hourBucket(v T, ts int64) string {
	if ts == eventtime.NoTimestamp {
		ts = c.cfg.now().UnixMilli()
	}
	const hour = int64(time.Hour / time.Millisecond)
	if c.hourName == "" || ts < c.hourStart || ts >= c.hourStart+hour {
		c.hourStart = ts - ((ts%hour)+hour)%hour
		c.hourName = time.UnixMilli(c.hourStart).UTC().Format(hourLayout)
	}
	return c.hourName
}

func (c *committer[T]) Begin() (*txn, error) {
	c.cur = &txn{}
	if !c.begun {
		c.begun = true
		if !c.ckpt {
			// Without checkpoints nothing is ever restored: every hidden
			// file of this subtask's share is left by an earlier run.
			c.cleanup()
		}
	}
	return c.cur, nil
}

func (c *committer[T]) Write(t *txn, v T) error {
	return c.WriteTimestamped(t, v, eventtime.NoTimestamp)
}

// WriteTimestamped implements weir.TimestampWriter: the bucket may depend
// on the event time.
func (c *committer[T]) WriteTimestamped(t *txn, v T, ts int64) error {
	if t != c.cur || t == nil {
		return errors.New("parquet: sink: write outside the open transaction")
	}
	c.seq++
	b := c.bucketOf(v, ts)
	p := c.last
	if p == nil || p.bucket != b {
		if p = c.parts[b]; p == nil {
			var err error
			if p, err = c.open(b); err != nil {
				return err
			}
		}
		c.last = p
		p.used = c.seq
	}
	p.batch = append(p.batch, v)
	if len(p.batch) == batchLen {
		if err := c.flushBatch(p); err != nil {
			return err
		}
		if p.w.Size() >= c.cfg.RollSize {
			if err := c.roll(p); err != nil {
				return err
			}
		}
	}
	if c.cfg.RollInterval > 0 && c.seq%clockEvery == 0 {
		return c.rollAged()
	}
	return nil
}

// rollAged rolls the parts open longer than RollInterval.
func (c *committer[T]) rollAged() error {
	now := c.cfg.now()
	for _, p := range c.sortedParts() {
		if now.Sub(p.opened) >= c.cfg.RollInterval {
			if err := c.roll(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// sortedParts returns the open parts by name, so that they roll in an
// order that does not depend on map iteration.
func (c *committer[T]) sortedParts() []*part[T] {
	ps := make([]*part[T], 0, len(c.parts))
	for _, p := range c.parts {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *part[T]) int { return strings.Compare(a.rel, b.rel) })
	return ps
}

// open starts a part file in bucket b, rolling the least recently
// written part first if MaxOpenParts are open.
func (c *committer[T]) open(b string) (*part[T], error) {
	if err := checkBucket(b); err != nil {
		return nil, err
	}
	if len(c.parts) >= c.cfg.MaxOpenParts {
		var lru *part[T]
		for _, p := range c.parts {
			if lru == nil || p.used < lru.used {
				lru = p
			}
		}
		if err := c.roll(lru); err != nil {
			return nil, err
		}
	}
	name := fmt.Sprintf("%s-%s-%d-%d%s", c.cfg.PartPrefix, c.uid, c.sub, c.counter, c.cfg.PartSuffix)
	c.counter++
	p := &part[T]{bucket: b, rel: filepath.Join(filepath.FromSlash(b), name), opened: c.cfg.now()}
	if c.obj != nil {
		up, err := c.obj.start(p.rel)
		if err != nil {
			return nil, err
		}
		c.cur.Files = append(c.cur.Files, p.rel)
		c.cur.Uploads = append(c.cur.Uploads, up)
		p.hidden = c.obj.url + "/" + filepath.ToSlash(p.rel) + " (upload)"
		p.out = &objectPart{o: c.obj, rel: p.rel, up: up}
	} else {
		dir := filepath.Join(c.cfg.Dir, filepath.FromSlash(b))
		if !c.dirs[dir] {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("parquet: sink: bucket directory: %w", err)
			}
			c.dirs[dir] = true
		}
		p.hidden = filepath.Join(dir, hiddenName(name))
		f, err := os.OpenFile(p.hidden, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("parquet: sink: create part file: %w", err)
		}
		c.cur.Files = append(c.cur.Files, p.rel)
		if !slices.Contains(c.synced, dir) {
			c.synced = append(c.synced, dir)
		}
		p.out = localPart{f}
	}
	if n := len(c.free); n > 0 {
		p.w = c.free[n-1]
		c.free = c.free[:n-1]
		p.w.Reset(p.out)
	} else {
		p.w = pq.NewGenericWriter[T](p.out, c.opts...)
	}
	p.batch = make([]T, 0, batchLen)
	c.parts[b] = p
	return p, nil
}

// checkBucket reports a bucket that is no directory inside Dir.
func checkBucket(b string) error {
	if b == "" {
		return nil
	}
	if !filepath.IsLocal(filepath.FromSlash(b)) || strings.ContainsRune(b, '\\') {
		return fmt.Errorf("parquet: sink: bucket %q is not a relative directory inside Dir", b)
	}
	for _, e := range strings.Split(b, "/") {
		if strings.HasPrefix(e, ".") || strings.HasPrefix(e, "_") {
			return fmt.Errorf("parquet: sink: bucket %q has a hidden directory (a leading '.' or '_'): readers would skip its files", b)
		}
	}
	return nil
}

// flushBatch hands p's buffered values to the writer and writes a row
// group once RowGroupSize is buffered.
func (c *committer[T]) flushBatch(p *part[T]) error {
	if len(p.batch) > 0 {
		_, err := p.w.Write(p.batch)
		clear(p.batch)
		p.batch = p.batch[:0]
		if err != nil {
			return fmt.Errorf("parquet: sink: write %s: %w", p.hidden, err)
		}
	}
	if p.w.Size()-p.groupAt >= c.cfg.RowGroupSize {
		if err := p.w.Flush(); err != nil {
			return fmt.Errorf("parquet: sink: write %s: %w", p.hidden, err)
		}
		p.groupAt = p.w.Size()
	}
	return nil
}

// roll completes p (its footer written, fsynced, closed): it is pending,
// committed with cur.
func (c *committer[T]) roll(p *part[T]) error {
	delete(c.parts, p.bucket)
	if c.last == p {
		c.last = nil
	}
	err := c.flushBatch(p)
	if err == nil {
		if err = p.w.Close(); err != nil {
			err = fmt.Errorf("parquet: sink: write %s: %w", p.hidden, err)
		}
	}
	if err == nil {
		err = p.out.finish()
	} else {
		p.out.discard()
	}
	if err != nil {
		return err // the writer is dropped: its state is unknown
	}
	if len(c.free) < c.cfg.MaxOpenParts {
		c.free = append(c.free, p.w)
	}
	return nil
}

// PreCommit rolls every open part of t and makes the directory entries of
// its files durable: they are pending, recorded in the checkpoint.
func (c *committer[T]) PreCommit(t *txn) error {
	if t != c.cur {
		return nil // pre-committed before
	}
	for _, p := range c.sortedParts() {
		if err := c.roll(p); err != nil {
			return err
		}
	}
	for _, d := range c.synced {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("parquet: sink: fsync directory %s: %w", d, err)
		}
	}
	c.synced = c.synced[:0]
	c.cur = nil
	return nil
}

// Commit renames t's pending files to their committed names; it is
// idempotent. The first commit after a checkpoint completed in this
// attempt removes what earlier attempts left (see cleanup).
func (c *committer[T]) Commit(t *txn) error {
	if c.obj != nil {
		if len(t.Uploads) != len(t.Files) {
			return errCorruptTxn
		}
		for i, rel := range t.Files {
			if err := c.obj.commit(rel, t.Uploads[i]); err != nil {
				return err
			}
		}
		if c.begun && !c.cleaned && !c.closed {
			c.cleanup()
		}
		return nil
	}
	var dirs []string
	for _, rel := range t.Files {
		final := filepath.Join(c.cfg.Dir, rel)
		hidden := filepath.Join(filepath.Dir(final), hiddenName(filepath.Base(final)))
		err := os.Rename(hidden, final)
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(final); serr == nil {
				continue // committed before
			}
			return fmt.Errorf("parquet: sink: pending part file %s is gone: its records are lost", hidden)
		}
		if err != nil {
			return fmt.Errorf("parquet: sink: commit: %w", err)
		}
		if d := filepath.Dir(final); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("parquet: sink: fsync directory %s: %w", d, err)
		}
	}
	if c.begun && !c.cleaned && !c.closed {
		c.cleanup()
	}
	return nil
}

// Abort discards t: its open parts are closed and all its files removed.
func (c *committer[T]) Abort(t *txn) error {
	var errs []error
	if t == c.cur && t != nil {
		for _, p := range c.parts {
			p.out.discard()
			p.w.Reset(io.Discard)
			if len(c.free) < c.cfg.MaxOpenParts {
				c.free = append(c.free, p.w)
			}
		}
		clear(c.parts)
		c.last, c.cur = nil, nil
		c.synced = c.synced[:0]
	}
	if c.obj != nil {
		for i, rel := range t.Files {
			if i < len(t.Uploads) {
				errs = append(errs, c.obj.abort(rel, t.Uploads[i]))
			}
		}
		return errors.Join(errs...)
	}
	for _, rel := range t.Files {
		final := filepath.Join(c.cfg.Dir, rel)
		err := os.Remove(filepath.Join(filepath.Dir(final), hiddenName(filepath.Base(final))))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("parquet: sink: abort: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Close releases the open files (the sink aborted the open transaction
// before); commits that follow (at the end of the job) still work.
func (c *committer[T]) Close() error {
	c.closed = true
	for _, p := range c.parts {
		p.out.discard()
	}
	clear(c.parts)
	c.free, c.last = nil, nil
	return nil
}
