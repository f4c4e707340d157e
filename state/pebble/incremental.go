package pebble

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// Incremental checkpoints (Flink's incremental RocksDB checkpoints).
//
// The synchronous part flushes the memtables (the write-ahead log is off)
// and has pebble hard-link the database's files into a checkpoint
// directory: O(files), no copying. The asynchronous part uploads, as
// shared files keyed by this backend's ID, the table files that the last
// checkpoint known to have completed did not already upload, refers to
// the others, and uploads the private files (MANIFEST, OPTIONS, markers)
// every time. Table files are immutable and never reused under the same
// name, so a file name identifies its content.
//
// Only completed checkpoints count (NotifyCheckpointComplete): a file
// uploaded for a checkpoint that was aborted is uploaded again. Storage
// deletes a shared file when no remaining checkpoint refers to it.

// incremental is the bookkeeping of incremental checkpoints.
type incremental struct {
	backend string // this backend instance's ID: the namespace of its shared files
	mu      struct {
		sync.Mutex
		// uploaded are the shared files of each snapshot whose
		// asynchronous part succeeded, until it completes or is subsumed.
		uploaded map[barrier.CheckpointID]map[string]state.NamedHandle
		// completed are the shared files of the newest completed
		// checkpoint: the ones the next checkpoint need not upload.
		completed map[string]state.NamedHandle
	}
}

func newIncremental() (*incremental, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("pebble: backend id: %w", err)
	}
	inc := &incremental{backend: "pebble-" + hex.EncodeToString(id[:])}
	inc.mu.uploaded = map[barrier.CheckpointID]map[string]state.NamedHandle{}
	return inc, nil
}

// NotifyCheckpointComplete implements state.CheckpointListener: the shared
// files of checkpoint id are the base of the next incremental checkpoint.
func (b *Backend) NotifyCheckpointComplete(id barrier.CheckpointID) {
	if b.inc == nil {
		return
	}
	inc := b.inc
	inc.mu.Lock()
	defer inc.mu.Unlock()
	files, ok := inc.mu.uploaded[id]
	if !ok {
		return
	}
	inc.mu.completed = files
	for k := range inc.mu.uploaded {
		if k <= id {
			delete(inc.mu.uploaded, k)
		}
	}
}

// isShared reports whether the checkpoint file name is an immutable table
// (or blob) file, uploaded once and shared.
func isShared(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// snapshotIncremental is the synchronous part of an incremental checkpoint.
func (b *Backend) snapshotIncremental(id barrier.CheckpointID, w state.SharedStateWriterFactory) (state.KeyedSnapshotFunc, error) {
	if err := b.writeErr(); err != nil {
		return nil, fmt.Errorf("pebble: checkpoint %d: %w", id, err)
	}
	if err := b.db.Flush(); err != nil {
		return nil, fmt.Errorf("pebble: checkpoint %d: flush: %w", id, err)
	}
	dir := filepath.Join(b.dir, fmt.Sprintf("chk-%d", id))
	if err := b.cfg.FS.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("pebble: checkpoint %d: %w", id, err)
	}
	if err := b.db.Checkpoint(dir); err != nil {
		_ = b.cfg.FS.RemoveAll(dir)
		return nil, fmt.Errorf("pebble: checkpoint %d: local checkpoint: %w", id, err)
	}
	b.inc.mu.Lock()
	base := b.inc.mu.completed
	b.inc.mu.Unlock()

	var once sync.Once
	return func(ctx context.Context) (*state.KeyedStateHandle, error) {
		ran := false
		once.Do(func() { ran = true })
		if !ran {
			return nil, fmt.Errorf("pebble: checkpoint %d: asynchronous part called twice", id)
		}
		defer b.release()
		defer func() {
			if err := b.cfg.FS.RemoveAll(dir); err != nil {
				b.log.Warn("removing a local checkpoint directory", zap.String("dir", dir), zap.Error(err))
			}
		}()
		h, shared, err := b.upload(ctx, id, w, dir, base)
		if err != nil {
			return nil, fmt.Errorf("pebble: checkpoint %d: upload: %w", id, err)
		}
		b.inc.mu.Lock()
		b.inc.mu.uploaded[id] = shared
		b.inc.mu.Unlock()
		return h, nil
	}, nil
}

// upload writes the files of the local checkpoint in dir to w: table files
// not in base as shared files, the rest as private files.
func (b *Backend) upload(ctx context.Context, id barrier.CheckpointID, w state.SharedStateWriterFactory, dir string,
	base map[string]state.NamedHandle) (*state.KeyedStateHandle, map[string]state.NamedHandle, error) {
	names, err := b.cfg.FS.List(dir)
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(names)
	inc := &state.IncrementalHandle{Backend: b.inc.backend}
	shared := map[string]state.NamedHandle{}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		p := filepath.Join(dir, name)
		fi, err := b.cfg.FS.Stat(p)
		if err != nil {
			return nil, nil, err
		}
		if fi.IsDir() {
			continue
		}
		if !isShared(name) {
			h, err := b.copyOut(ctx, p, func() (state.StateWriter, error) { return w.CreateStateWriter(id, "keyed-"+name) })
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", name, err)
			}
			inc.Private = append(inc.Private, state.NamedHandle{Name: name, StreamHandle: h})
			continue
		}
		nh, ok := base[name]
		if !ok || nh.Size != fi.Size() {
			h, err := b.copyOut(ctx, p, func() (state.StateWriter, error) { return w.CreateSharedStateWriter(id, b.inc.backend, name) })
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", name, err)
			}
			nh = state.NamedHandle{Name: name, StreamHandle: h}
		}
		shared[name] = nh
		inc.Shared = append(inc.Shared, nh)
	}
	return &state.KeyedStateHandle{KeyGroups: b.rng, Incremental: inc}, shared, nil
}

// copyOut copies the local file p into a state file created by create.
func (b *Backend) copyOut(ctx context.Context, p string, create func() (state.StateWriter, error)) (state.StreamHandle, error) {
	f, err := b.cfg.FS.Open(p)
	if err != nil {
		return state.StreamHandle{}, err
	}
	defer f.Close()
	sw, err := create()
	if err != nil {
		return state.StreamHandle{}, err
	}
	if _, err := io.Copy(sw, ctxReader{ctx: ctx, r: f}); err != nil {
		_ = sw.Abort()
		return state.StreamHandle{}, err
	}
	h, err := sw.Close()
	if err != nil {
		_ = sw.Abort()
		return state.StreamHandle{}, err
	}
	return h, nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// download writes the files of h into the new local directory dir,
// verifying each (a missing or corrupt file is a *state.CorruptError).
func (b *Backend) download(h *state.IncrementalHandle, r state.StateReader, dir string) error {
	if err := b.cfg.FS.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range slices.Concat(h.Shared, h.Private) {
		if f.Name == "" || strings.ContainsAny(f.Name, `/\`) || f.Name == "." || f.Name == ".." {
			return &state.CorruptError{Path: f.Path, Reason: fmt.Sprintf("bad local file name %q", f.Name)}
		}
		if err := b.downloadFile(f, r, filepath.Join(dir, f.Name)); err != nil {
			return fmt.Errorf("file %s: %w", f.Name, err)
		}
	}
	return nil
}

func (b *Backend) downloadFile(f state.NamedHandle, r state.StateReader, p string) (err error) {
	src, err := r.OpenState(f.StreamHandle)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := b.cfg.FS.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, io.NewSectionReader(src, 0, src.Size())); err != nil {
		_ = dst.Close()
		return err
	}
	// No sync: the working copy is never recovered after a crash
	// (noSyncFS).
	return dst.Close()
}

// restoreIncremental restores incremental snapshots. A single snapshot of
// exactly this backend's key groups becomes the database itself; otherwise
// (rescaling) each snapshot is opened on the side and the key groups of
// this backend's range are copied from it.
func (b *Backend) restoreIncremental(handles []state.KeyedStateHandle, r state.StateReader) error {
	if len(handles) == 1 && handles[0].KeyGroups == b.rng && len(b.metas) == 0 {
		h := handles[0].Incremental
		dir := filepath.Join(b.dir, "restore")
		if err := b.download(h, r, dir); err != nil {
			return fmt.Errorf("pebble: restore incremental snapshot of %s: %w", h.Backend, err)
		}
		_ = b.wb.Close() // empty: the batch of the database replaced
		err := b.db.Close()
		b.db = nil
		if err != nil {
			return fmt.Errorf("pebble: restore: close empty database: %w", err)
		}
		dbDir := filepath.Join(b.dir, "db")
		if err := b.cfg.FS.RemoveAll(dbDir); err != nil {
			return fmt.Errorf("pebble: restore: %w", err)
		}
		if err := b.cfg.FS.Rename(dir, dbDir); err != nil {
			return fmt.Errorf("pebble: restore: %w", err)
		}
		db, err := b.open(dbDir, false)
		if err != nil {
			return fmt.Errorf("pebble: restore incremental snapshot of %s: %w", h.Backend, err)
		}
		b.db = db
		b.wb = db.NewBatch()
		reg, err := readRegistry(db)
		if err != nil {
			return fmt.Errorf("pebble: restore incremental snapshot of %s: %w", h.Backend, err)
		}
		for i := range len(reg) {
			m, ok := reg[uint32(i)]
			if !ok {
				return fmt.Errorf("pebble: restore incremental snapshot of %s: state %d missing from the registry", h.Backend, i)
			}
			b.metas = append(b.metas, m)
			b.byName[m.Name] = state.StateID(i)
		}
		return nil
	}
	for i, kh := range handles {
		if err := b.copyRanges(kh, r, filepath.Join(b.dir, fmt.Sprintf("restore-%d", i))); err != nil {
			return fmt.Errorf("pebble: restore incremental snapshot of %s: %w", kh.Incremental.Backend, err)
		}
	}
	return nil
}

// copyRanges downloads h into dir, opens it and copies the key groups of
// this backend's range from it.
func (b *Backend) copyRanges(h state.KeyedStateHandle, r state.StateReader, dir string) (err error) {
	lo, hi := max(h.KeyGroups.Start, b.rng.Start), min(h.KeyGroups.End, b.rng.End)
	if lo > hi {
		return nil
	}
	defer func() {
		if rerr := b.cfg.FS.RemoveAll(dir); err == nil && rerr != nil {
			err = rerr
		}
	}()
	if err := b.download(h.Incremental, r, dir); err != nil {
		return err
	}
	src, err := b.open(dir, true)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := src.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	reg, err := readRegistry(src)
	if err != nil {
		return err
	}
	ids := map[uint32]uint32{}
	for id, m := range reg {
		mine, err := b.Register(m.Name, m.Kind)
		if err != nil {
			return err
		}
		ids[id] = uint32(mine)
	}
	return copyGroups(src, b.db, keygroup.Range{Start: lo, End: hi}, ids)
}

// copyGroups copies the key groups rng from src into dst, mapping state
// IDs through ids.
func copyGroups(src, dst *pdb.DB, rng keygroup.Range, ids map[uint32]uint32) (err error) {
	lower, _ := groupBounds(rng.Start)
	_, upper := groupBounds(rng.End)
	it, err := src.NewIter(&pdb.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}()
	batch := dst.NewBatch()
	defer func() { _ = batch.Close() }()
	var kb []byte
	for ok := it.First(); ok; ok = it.Next() {
		d, err := parseDataKey(it.Key())
		if err != nil {
			return err
		}
		id, ok := ids[d.state]
		if !ok {
			return fmt.Errorf("key %x of unregistered state %d", it.Key(), d.state)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		kb = append(appendPrefix(kb[:0], d.group, id, d.key), d.userKey...)
		_ = batch.Set(kb, v, nil)
		if batch.Len() >= 4<<20 {
			if err := batch.Commit(pdb.NoSync); err != nil {
				return err
			}
			batch.Reset()
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if batch.Empty() {
		return nil
	}
	return batch.Commit(pdb.NoSync)
}

// readRegistry reads the state registry of db.
func readRegistry(db *pdb.DB) (map[uint32]state.StateMeta, error) {
	it, err := db.NewIter(&pdb.IterOptions{LowerBound: registryPrefix, UpperBound: successor(registryPrefix)})
	if err != nil {
		return nil, err
	}
	reg := map[uint32]state.StateMeta{}
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != len(registryPrefix)+4 || len(v) < 1 || !state.Kind(v[0]).Valid() {
			_ = it.Close()
			return nil, fmt.Errorf("bad registry entry %x = %x", k, v)
		}
		reg[binary.BigEndian.Uint32(k[len(registryPrefix):])] = state.StateMeta{Name: string(v[1:]), Kind: state.Kind(v[0])}
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return reg, nil
}
