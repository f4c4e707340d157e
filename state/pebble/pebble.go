package pebble

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// Defaults of Config, after Flink's RocksDB backend: a 64 MiB write buffer,
// at most two of them, and a bounded block cache.
const (
	DefaultBlockCacheSize = 64 << 20
	DefaultMemTableSize   = 64 << 20
	DefaultMemTables      = 2
	// DefaultCacheBytes bounds the write-back cache of typed values in
	// front of the database (Config.CacheBytes).
	DefaultCacheBytes = 64 << 20
)

// Config configures a Backend. The zero value serves all key groups of a
// job with parallelism 1 and the default max parallelism, in a working
// directory under os.TempDir(), with full snapshots.
type Config struct {
	// MaxParallelism is the number of key groups; 0 means
	// keygroup.DefaultMaxParallelism.
	MaxParallelism int
	// Parallelism and Index select the key-group range this backend serves
	// (keygroup.RangeFor); Parallelism 0 means 1.
	Parallelism, Index int
	// Dir is the local directory under which the backend creates its
	// working directory (removed on Close); "" means os.TempDir().
	Dir string
	// BlockCacheSize bounds the block cache in bytes; 0 means
	// DefaultBlockCacheSize.
	BlockCacheSize int64
	// MemTableSize is the size of one memtable (write buffer) in bytes; 0
	// means DefaultMemTableSize. Writes stall while MemTables of them wait
	// to be flushed.
	MemTableSize uint64
	// MemTables is the number of memtables before writes stall; 0 means
	// DefaultMemTables.
	MemTables int
	// CacheBytes bounds the write-back cache in front of the database, in
	// bytes of the Go heap: the values of value, list, reducing and
	// aggregating states, as the heap backend holds them, each with a
	// constant overhead (about 128 bytes). A cached key is read and
	// updated without touching pebble; cold entries are evicted to pebble
	// in sorted batches, and the dirty ones are written in one batch at
	// each snapshot, before pebble's. 0 means DefaultCacheBytes; a
	// negative value turns the cache off (every access goes to pebble).
	// Map states are not cached.
	CacheBytes int64
	// DirtyBytes bounds the cache's dirty entries (written since the last
	// write-back): beyond it they are written to pebble, in one sorted
	// batch, and stay cached, clean. It bounds the write a snapshot's
	// synchronous part does: with the default cache of 64 MiB and 4 MiB
	// of dirty entries (about 28,000 of 8-byte values) it takes some
	// 30 ms (BenchmarkSnapshotSync). 0 means a sixteenth of CacheBytes;
	// it must not exceed CacheBytes.
	DirtyBytes int64
	// Incremental makes checkpoints incremental: each uploads only the
	// files of the database that no previous checkpoint uploaded.
	// Savepoints are always full.
	Incremental bool
	// FS is the local file system; nil means the operating system's. Tests
	// inject failures through it.
	FS vfs.FS
	// Logger; nil means no logging.
	Logger *zap.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxParallelism == 0 {
		c.MaxParallelism = keygroup.DefaultMaxParallelism
	}
	if c.Parallelism == 0 {
		c.Parallelism = 1
	}
	if err := keygroup.Validate(c.MaxParallelism, c.Parallelism); err != nil {
		return c, fmt.Errorf("pebble: %w", err)
	}
	if c.Index < 0 || c.Index >= c.Parallelism {
		return c, fmt.Errorf("pebble: subtask index %d out of range [0, %d)", c.Index, c.Parallelism)
	}
	if c.BlockCacheSize < 0 || c.MemTables < 0 {
		return c, fmt.Errorf("pebble: negative block cache size %d or memtable count %d", c.BlockCacheSize, c.MemTables)
	}
	if c.BlockCacheSize == 0 {
		c.BlockCacheSize = DefaultBlockCacheSize
	}
	if c.MemTableSize == 0 {
		c.MemTableSize = DefaultMemTableSize
	}
	if c.MemTableSize < 64<<10 || c.MemTableSize > 4<<30 {
		return c, fmt.Errorf("pebble: memtable size %d out of range [64 KiB, 4 GiB]", c.MemTableSize)
	}
	if c.MemTables == 0 {
		c.MemTables = DefaultMemTables
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.DirtyBytes < 0 || (c.CacheBytes > 0 && c.DirtyBytes > c.CacheBytes) {
		return c, fmt.Errorf("pebble: dirty bytes %d out of range [0, cache bytes %d]", c.DirtyBytes, c.CacheBytes)
	}
	if c.DirtyBytes == 0 && c.CacheBytes > 0 {
		c.DirtyBytes = max(c.CacheBytes/16, 1)
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// Backend is the keyed state backend of one subtask on an embedded pebble
// database.
type Backend struct {
	cfg    Config
	maxPar int
	// schemas are the states' schemas, for the typed states' checks.
	schemas state.Schemas
	rng     keygroup.Range
	log     *zap.Logger
	dir     string // the working directory (removed on Close)
	db      *pdb.DB

	metas  []state.StateMeta
	byName map[string]state.StateID
	ttl    []func() int64 // per state: the clock of its TTL, nil without

	// The current key: kbuf holds group | state | framed key, and the
	// state bytes are rewritten for each access.
	curKey   []byte
	curGroup int
	kbuf     []byte
	ukbuf    []byte
	val      []byte

	// bgErr is the first error of pebble's background work (a flush or
	// compaction that failed, say on a full disk): every later write
	// returns it, so that the task fails with the cause.
	bgErr atomic.Pointer[error]

	inc *incremental // nil unless cfg.Incremental

	// c is the write-back cache (nil when Config.CacheBytes < 0); wb is
	// the batch its evictions and write-backs are written in, committed
	// before the call that filled it returns. failed is the first failed
	// commit: every later call returns it (the cache dropped what the
	// batch held, so the database no longer has the state).
	c      *cache
	wb     *pdb.Batch
	failed error
	stats  CacheStats
	upd    []byte // Update's new value without the cache
	pf     prefetcher

	mu struct {
		sync.Mutex
		closed   bool
		inflight int  // asynchronous snapshot parts not yet returned
		torn     bool // the database is closed and the directory removed
	}
}

var _ state.KeyedBackend = (*Backend)(nil)

// New creates a backend with an empty database in a fresh working
// directory under cfg.Dir.
func New(cfg Config) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.FS.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("pebble: create local state directory: %w", err)
	}
	dir, err := mkdirTemp(cfg.FS, cfg.Dir, "weir-pebble-")
	if err != nil {
		return nil, fmt.Errorf("pebble: create working directory under %s: %w", cfg.Dir, err)
	}
	b := &Backend{
		cfg:      cfg,
		maxPar:   cfg.MaxParallelism,
		rng:      keygroup.RangeFor(cfg.MaxParallelism, cfg.Parallelism, cfg.Index),
		log:      cfg.Logger,
		dir:      dir,
		byName:   map[string]state.StateID{},
		curGroup: -1,
	}
	if cfg.CacheBytes > 0 {
		b.c = newCache(cfg.CacheBytes, cfg.DirtyBytes)
	}
	if cfg.Incremental {
		if b.inc, err = newIncremental(); err != nil {
			_ = cfg.FS.RemoveAll(dir)
			return nil, err
		}
	}
	if b.db, err = b.open(filepath.Join(dir, "db"), false); err != nil {
		_ = cfg.FS.RemoveAll(dir)
		return nil, err
	}
	b.wb = b.db.NewBatch()
	return b, nil
}

// mkdirTemp creates a new directory under parent named prefix and a random
// suffix, on fs.
func mkdirTemp(fs vfs.FS, parent, prefix string) (string, error) {
	for range 100 {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		dir := filepath.Join(parent, fmt.Sprintf("%s%x", prefix, r))
		if _, err := fs.Stat(dir); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		return dir, nil
	}
	return "", fmt.Errorf("pebble: no unused directory name under %s", parent)
}

// open opens (creating if needed, unless readOnly) the database in dir with
// the backend's options.
func (b *Backend) open(dir string, readOnly bool) (*pdb.DB, error) {
	// Pebble reserves its memtables from the block cache: size the cache
	// so that BlockCacheSize remains for blocks.
	cache := pdb.NewCache(b.cfg.BlockCacheSize + int64(b.cfg.MemTables)*int64(b.cfg.MemTableSize))
	defer cache.Unref()
	opts := &pdb.Options{
		FS:                          noSyncFS{b.cfg.FS}, // the working copy needs no durability
		Cache:                       cache,
		MemTableSize:                b.cfg.MemTableSize,
		MemTableStopWritesThreshold: b.cfg.MemTables,
		// Compact L0 at four sublevels (pebble's score is twice the
		// depth over this), RocksDB's and Flink's level-0 trigger of 4:
		// fewer compactions rewrite files that incremental checkpoints
		// then upload again.
		L0CompactionThreshold: 8,
		L0StopWritesThreshold: 24,
		// State is recovered from checkpoints, never from a log (as Flink
		// runs RocksDB): a checkpoint flushes the memtables instead.
		DisableWAL:         true,
		Merger:             pdb.DefaultMerger,
		FormatMajorVersion: pdb.FormatNewest,
		ReadOnly:           readOnly,
		Logger:             pebbleLogger{b.log.Sugar()},
		EventListener: &pdb.EventListener{BackgroundError: func(err error) {
			b.log.Error("pebble background error", zap.Error(err))
			err = fmt.Errorf("pebble: background flush or compaction: %w", err)
			b.bgErr.CompareAndSwap(nil, &err)
		}},
	}
	// Bloom filters (10 bits a key, 1 % false positives) spare point
	// reads (every Get) the tables that do not hold the key.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pdb.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	return db, nil
}

// pebbleLogger sends pebble's log to zap.
type pebbleLogger struct{ s *zap.SugaredLogger }

func (l pebbleLogger) Infof(format string, args ...any)  { l.s.Debugf(format, args...) }
func (l pebbleLogger) Errorf(format string, args ...any) { l.s.Errorf(format, args...) }
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.s.Errorf(format, args...)
	panic(fmt.Sprintf("pebble: fatal: "+format, args...))
}

// Compact compacts the whole database into its bottom level: after a bulk
// load, so that the following incremental checkpoints upload only what
// changes since (compactions rewrite files, which then upload again).
func (b *Backend) Compact(ctx context.Context) error {
	if err := b.db.Compact(ctx, []byte{0}, []byte{0xFF, 0xFF, 0xFF}, true); err != nil {
		return fmt.Errorf("pebble: compact: %w", err)
	}
	return nil
}

// Dir returns the backend's working directory.
func (b *Backend) Dir() string { return b.dir }

// KeyGroupRange implements state.KeyedBackend.
func (b *Backend) KeyGroupRange() keygroup.Range { return b.rng }

// MaxParallelism implements state.KeyedBackend.
func (b *Backend) MaxParallelism() int { return b.maxPar }

// StateSchemas implements state.SchemaHolder.
func (b *Backend) StateSchemas() *state.Schemas { return &b.schemas }

// Register implements state.KeyedBackend. The registry is stored in the
// database, so that an incremental checkpoint carries it.
func (b *Backend) Register(name string, kind state.Kind) (state.StateID, error) {
	if !kind.Valid() {
		return 0, fmt.Errorf("pebble: state %q: invalid kind %d", name, kind)
	}
	if id, ok := b.byName[name]; ok {
		if k := b.metas[id].Kind; k != kind {
			return 0, fmt.Errorf("pebble: state %q is registered as %s, requested as %s", name, k, kind)
		}
		return id, nil
	}
	id := state.StateID(len(b.metas))
	v := append([]byte{byte(kind)}, name...)
	if err := b.db.Set(registryKey(uint32(id)), v, pdb.NoSync); err != nil {
		return 0, fmt.Errorf("pebble: register state %q: %w", name, err)
	}
	b.metas = append(b.metas, state.StateMeta{Name: name, Kind: kind})
	b.byName[name] = id
	return id, nil
}

// EnableTTL implements state.TTLBackend: full snapshots leave the expired
// values of s out.
func (b *Backend) EnableTTL(s state.StateID, nowMillis func() int64) {
	if int(s) >= len(b.metas) {
		return
	}
	for len(b.ttl) <= int(s) {
		b.ttl = append(b.ttl, nil)
	}
	b.ttl[s] = nowMillis
}

// States implements state.KeyedBackend.
func (b *Backend) States() []state.StateMeta {
	return append([]state.StateMeta(nil), b.metas...)
}

// SetCurrentKey implements state.KeyedBackend.
func (b *Backend) SetCurrentKey(key []byte, keyGroup int) error {
	if !b.rng.Contains(keyGroup) {
		return &state.KeyGroupError{Group: keyGroup, Range: b.rng}
	}
	b.curKey = append(b.curKey[:0], key...)
	b.curGroup = keyGroup
	b.kbuf = appendPrefix(b.kbuf[:0], keyGroup, 0, key)
	return nil
}

// CurrentKey implements state.KeyedBackend.
func (b *Backend) CurrentKey() ([]byte, int) {
	if b.curGroup < 0 {
		return nil, -1
	}
	return b.curKey, b.curGroup
}

func (b *Backend) unsetKey() {
	b.curKey, b.curGroup = b.curKey[:0], -1
}

// prefix returns the data key prefix of (s, current key), aliasing kbuf.
func (b *Backend) prefix(s state.StateID) ([]byte, state.StateMeta, error) {
	if int(s) >= len(b.metas) {
		return nil, state.StateMeta{}, fmt.Errorf("pebble: unknown state id %d", s)
	}
	m := b.metas[s]
	if b.curGroup < 0 {
		return nil, m, fmt.Errorf("pebble: state %q accessed without a current key", m.Name)
	}
	b.kbuf[2], b.kbuf[3], b.kbuf[4], b.kbuf[5] = byte(s>>24), byte(s>>16), byte(s>>8), byte(s)
	return b.kbuf, m, nil
}

// key returns the data key of (s, current key, userKey).
func (b *Backend) key(s state.StateID, userKey []byte) ([]byte, state.StateMeta, error) {
	p, m, err := b.prefix(s)
	if err != nil || m.Kind != state.KindMap {
		return p, m, err
	}
	b.ukbuf = append(append(b.ukbuf[:0], p...), userKey...)
	return b.ukbuf, m, nil
}

// writeErr returns the failure of a cache write or the background error,
// if any.
func (b *Backend) writeErr() error {
	if b.failed != nil {
		return b.failed
	}
	if p := b.bgErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Get implements state.KeyedBackend.
func (b *Backend) Get(s state.StateID, userKey []byte) ([]byte, bool, error) {
	k, m, err := b.key(s, userKey)
	if err != nil {
		return nil, false, err
	}
	if b.c != nil && m.Kind != state.KindMap {
		i, err := b.cached(k, m)
		if err != nil {
			return nil, false, err
		}
		e := b.c.at(i)
		return e.val, e.present, nil
	}
	return b.get(k, m)
}

// get reads k from the database into b.val.
func (b *Backend) get(k []byte, m state.StateMeta) ([]byte, bool, error) {
	v, closer, err := b.db.Get(k)
	if errors.Is(err, pdb.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("pebble: state %q: get: %w", m.Name, err)
	}
	b.val = append(b.val[:0], v...)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("pebble: state %q: get: %w", m.Name, err)
	}
	return b.val, true, nil
}

// Put implements state.KeyedBackend.
func (b *Backend) Put(s state.StateID, userKey, value []byte) error {
	k, m, err := b.key(s, userKey)
	if err != nil {
		return err
	}
	if err := b.writeErr(); err != nil {
		return err
	}
	if b.c != nil && m.Kind != state.KindMap {
		i := b.c.lookup(k)
		if i < 0 {
			i = b.c.insert(k, value, true, true)
		} else {
			b.c.set(i, value)
		}
		return b.written(i)
	}
	if err := b.db.Set(k, value, pdb.NoSync); err != nil {
		return fmt.Errorf("pebble: state %q: put: %w", m.Name, err)
	}
	return nil
}

// Append implements state.KeyedBackend with pebble's concatenating merge
// operator: no read.
func (b *Backend) Append(s state.StateID, value []byte) error {
	k, m, err := b.prefix(s)
	if err != nil {
		return err
	}
	if m.Kind == state.KindMap {
		return fmt.Errorf("pebble: Append on map state %q", m.Name)
	}
	if err := b.writeErr(); err != nil {
		return err
	}
	if b.c != nil {
		// A cached list grows in the cache; one that is not merges into
		// the database without a read.
		if i := b.c.lookup(k); i >= 0 {
			if e := b.c.at(i); e.present {
				e.val = append(e.val, value...)
				b.c.resize(i)
				b.c.markDirty(i)
			} else {
				b.c.set(i, value)
			}
			return b.written(i)
		}
	}
	if err := b.db.Merge(k, value, pdb.NoSync); err != nil {
		return fmt.Errorf("pebble: state %q: append: %w", m.Name, err)
	}
	return nil
}

// Delete implements state.KeyedBackend.
func (b *Backend) Delete(s state.StateID, userKey []byte) error {
	k, m, err := b.key(s, userKey)
	if err != nil {
		return err
	}
	if err := b.writeErr(); err != nil {
		return err
	}
	if b.c != nil && m.Kind != state.KindMap {
		i := b.c.lookup(k)
		switch {
		case i < 0:
			i = b.c.insert(k, nil, false, true)
		case b.c.at(i).present:
			b.c.remove(i)
		default:
			return nil // known absent
		}
		return b.written(i)
	}
	if err := b.db.Delete(k, pdb.NoSync); err != nil {
		return fmt.Errorf("pebble: state %q: delete: %w", m.Name, err)
	}
	return nil
}

// Clear implements state.KeyedBackend: for a map state it deletes every
// user entry, one by one in a batch (no range tombstones).
func (b *Backend) Clear(s state.StateID) error {
	p, m, err := b.prefix(s)
	if err != nil {
		return err
	}
	if m.Kind != state.KindMap {
		return b.Delete(s, nil)
	}
	if err := b.writeErr(); err != nil {
		return err
	}
	it, err := b.db.NewIter(&pdb.IterOptions{LowerBound: p, UpperBound: successor(p)})
	if err != nil {
		return fmt.Errorf("pebble: state %q: clear: %w", m.Name, err)
	}
	batch := b.db.NewBatch()
	for ok := it.First(); ok; ok = it.Next() {
		_ = batch.Delete(it.Key(), nil) // a batch's Delete fails only after Commit
	}
	err = it.Close()
	if err == nil && !batch.Empty() {
		err = batch.Commit(pdb.NoSync)
	}
	if cerr := batch.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pebble: state %q: clear: %w", m.Name, err)
	}
	return nil
}

// Iterate implements state.KeyedBackend, in user-key byte order.
func (b *Backend) Iterate(s state.StateID, fn func(userKey, value []byte) bool) error {
	p, m, err := b.prefix(s)
	if err != nil {
		return err
	}
	if m.Kind != state.KindMap {
		return fmt.Errorf("pebble: Iterate on %s state %q", m.Kind, m.Name)
	}
	n := len(p)
	it, err := b.db.NewIter(&pdb.IterOptions{LowerBound: p, UpperBound: successor(p)})
	if err != nil {
		return fmt.Errorf("pebble: state %q: iterate: %w", m.Name, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("pebble: state %q: iterate: %w", m.Name, err)
		}
		if !fn(it.Key()[n:], v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("pebble: state %q: iterate: %w", m.Name, err)
	}
	return nil
}

// Entries implements state.KeyedBackend: the cached entries of s first,
// then the database's that the cache does not hold, in key-group, key and
// user-key byte order. It writes nothing.
func (b *Backend) Entries(s state.StateID, fn func(key []byte, keyGroup int, userKey, value []byte) bool) error {
	if int(s) >= len(b.metas) {
		return fmt.Errorf("pebble: unknown state id %d", s)
	}
	m := b.metas[s]
	if err := b.writeErr(); err != nil {
		return fmt.Errorf("pebble: state %q: entries: %w", m.Name, err)
	}
	cached := b.c != nil && m.Kind != state.KindMap
	if cached {
		stop := false
		var err error
		b.c.all(func(key string, val []byte) bool {
			d, perr := parseDataKey(unsafe.Slice(unsafe.StringData(key), len(key)))
			if perr != nil {
				err = perr
				return false
			}
			if d.state != uint32(s) {
				return true
			}
			stop = !fn(d.key, d.group, nil, val)
			return !stop
		})
		if err != nil {
			return fmt.Errorf("pebble: state %q: entries: %w", m.Name, err)
		}
		if stop {
			return nil
		}
	}
	it, err := b.db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("pebble: state %q: entries: %w", m.Name, err)
	}
	err = func() error {
		for g := b.rng.Start; g <= b.rng.End; g++ {
			lo, hi := stateBounds(g, uint32(s))
			it.SetBounds(lo, hi)
			for ok := it.First(); ok; ok = it.Next() {
				if cached && b.c.holds(it.Key()) {
					continue
				}
				d, err := parseDataKey(it.Key())
				if err != nil {
					return err
				}
				v, err := it.ValueAndErr()
				if err != nil {
					return err
				}
				if m.Kind != state.KindMap {
					d.userKey = nil
				}
				if !fn(d.key, g, d.userKey, v) {
					return nil
				}
			}
		}
		return nil
	}()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pebble: state %q: entries: %w", m.Name, err)
	}
	return nil
}

// Snapshot implements state.KeyedBackend. A full snapshot (every savepoint,
// and every checkpoint unless Config.Incremental) takes a pebble snapshot
// in the synchronous part, O(1), and writes the self-contained keyed
// snapshot format every backend reads in the asynchronous part. An
// incremental checkpoint flushes the memtables and hard-links the
// database's files in the synchronous part, and uploads the files no
// previous checkpoint uploaded in the asynchronous part.
func (b *Backend) Snapshot(id barrier.CheckpointID, w state.StateWriterFactory) (state.KeyedSnapshotFunc, error) {
	if err := b.flushCache(); err != nil {
		return nil, fmt.Errorf("pebble: snapshot %d: %w", id, err)
	}
	if err := b.acquire(); err != nil {
		return nil, fmt.Errorf("pebble: snapshot %d: %w", id, err)
	}
	if sw, ok := w.(state.SharedStateWriterFactory); ok && b.inc != nil {
		f, err := b.snapshotIncremental(id, sw)
		if err != nil {
			b.release()
			return nil, err
		}
		return f, nil
	}
	snap := b.db.NewSnapshot()
	metas := b.States()
	ttl := append([]func() int64(nil), b.ttl...)
	var once sync.Once
	return func(ctx context.Context) (*state.KeyedStateHandle, error) {
		ran := false
		once.Do(func() { ran = true })
		if !ran {
			return nil, fmt.Errorf("pebble: snapshot %d: asynchronous part called twice", id)
		}
		defer b.release()
		defer snap.Close()
		h, err := writeFull(ctx, id, w, b.maxPar, b.rng, metas, ttl, snap)
		if err != nil {
			return nil, fmt.Errorf("pebble: snapshot %d: %w", id, err)
		}
		return h, nil
	}, nil
}

// reader is what a full snapshot reads: a pebble snapshot or database.
type reader interface {
	NewIter(o *pdb.IterOptions) (*pdb.Iterator, error)
}

// writeFull writes the key groups rng of r in the keyed snapshot format.
func writeFull(ctx context.Context, id barrier.CheckpointID, w state.StateWriterFactory, maxPar int,
	rng keygroup.Range, metas []state.StateMeta, ttl []func() int64, r reader) (*state.KeyedStateHandle, error) {
	// The clocks of the states with a TTL, read once: expired values stay
	// out.
	now := make([]int64, len(ttl))
	for i, f := range ttl {
		if f != nil {
			now[i] = f()
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sw, err := w.CreateStateWriter(id, "keyed")
	if err != nil {
		return nil, err
	}
	kw := state.NewKeyedSnapshotWriter(sw, maxPar, rng, metas)
	it, err := r.NewIter(nil)
	if err != nil {
		_ = kw.Abort()
		return nil, err
	}
	err = func() error {
		for g := rng.Start; g <= rng.End; g++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := kw.BeginKeyGroup(g); err != nil {
				return err
			}
			lo, hi := groupBounds(g)
			it.SetBounds(lo, hi)
			for ok := it.First(); ok; ok = it.Next() {
				d, err := parseDataKey(it.Key())
				if err != nil {
					return err
				}
				if int(d.state) >= len(metas) {
					return fmt.Errorf("pebble: key %x of unregistered state %d", it.Key(), d.state)
				}
				v, err := it.ValueAndErr()
				if err != nil {
					return err
				}
				if int(d.state) < len(ttl) && ttl[d.state] != nil {
					var keep bool
					if v, keep = state.DropExpired(metas[d.state].Kind, now[d.state], v); !keep {
						continue
					}
				}
				if err := kw.Record(int(d.state), d.key, d.userKey, v); err != nil {
					return err
				}
			}
			if err := it.Error(); err != nil {
				return err
			}
		}
		return nil
	}()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = kw.Abort()
		return nil, err
	}
	return kw.Close()
}

// acquire registers an asynchronous snapshot part in flight; the database
// stays open until it is released.
func (b *Backend) acquire() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.closed {
		return errors.New("backend closed")
	}
	b.mu.inflight++
	return nil
}

// release ends an asynchronous part; the last one after Close tears the
// database down.
func (b *Backend) release() {
	b.mu.Lock()
	b.mu.inflight--
	teardown := b.mu.closed && b.mu.inflight == 0 && !b.mu.torn
	if teardown {
		b.mu.torn = true
	}
	b.mu.Unlock()
	if teardown {
		if err := b.teardown(); err != nil {
			b.log.Error("pebble backend teardown", zap.Error(err))
		}
	}
}

// Restore implements state.KeyedBackend: it loads the key groups of this
// backend's range from the snapshots of all previous subtasks, full ones
// (written by any backend) or incremental ones.
func (b *Backend) Restore(handles []state.KeyedStateHandle, r state.StateReader) error {
	defer b.unsetKey()
	if b.c != nil {
		b.c.reset()
	}
	var full, inc []state.KeyedStateHandle
	for _, h := range handles {
		if h.Incremental != nil {
			inc = append(inc, h)
		} else {
			full = append(full, h)
		}
	}
	if len(inc) > 0 {
		if err := b.restoreIncremental(inc, r); err != nil {
			return err
		}
	}
	return b.restoreFull(full, r)
}

// restoreFull loads full snapshots through write batches.
func (b *Backend) restoreFull(handles []state.KeyedStateHandle, r state.StateReader) error {
	if len(handles) == 0 {
		return nil
	}
	batch := b.db.NewBatch()
	defer func() { _ = batch.Close() }()
	var kb []byte
	err := state.ReadKeyedSnapshots(handles, b.maxPar, b.rng, r,
		func(metas []state.StateMeta) error {
			for _, m := range metas {
				if _, err := b.Register(m.Name, m.Kind); err != nil {
					return err
				}
			}
			return nil
		},
		func(rec state.KeyedRecord) error {
			id := b.byName[rec.State.Name]
			kb = append(appendPrefix(kb[:0], rec.KeyGroup, uint32(id), rec.Key), rec.UserKey...)
			_ = batch.Set(kb, rec.Value, nil)
			if batch.Len() >= 4<<20 {
				if err := batch.Commit(pdb.NoSync); err != nil {
					return err
				}
				batch.Reset()
			}
			return nil
		})
	if err == nil && !batch.Empty() {
		err = batch.Commit(pdb.NoSync)
	}
	if err != nil {
		return fmt.Errorf("pebble: restore: %w", err)
	}
	return nil
}

// Close implements state.KeyedBackend: it closes the database and removes
// the working directory, once the asynchronous snapshot parts in flight
// have returned. It is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return nil
	}
	b.mu.closed = true
	if b.c != nil {
		b.c.reset() // the task's goroutine: the snapshots in flight do not use it
	}
	teardown := b.mu.inflight == 0
	b.mu.torn = teardown
	b.mu.Unlock()
	if !teardown {
		return nil
	}
	return b.teardown()
}

func (b *Backend) teardown() error {
	var err error
	if b.wb != nil {
		_ = b.wb.Close()
	}
	if b.db != nil {
		if err = b.db.Close(); err != nil {
			err = fmt.Errorf("pebble: close database: %w", err)
		}
	}
	if rerr := b.cfg.FS.RemoveAll(b.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("pebble: remove working directory: %w", rerr))
	}
	return err
}
