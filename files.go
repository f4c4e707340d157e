package weir

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/weirstream/weir/codec"
)

// FileSink writes s to part files in dir, exactly once: each checkpoint's
// values go to an in-progress file (".part-….inprogress") that is fsynced
// at the checkpoint and renamed to "part-…" when the checkpoint completes.
// Readers see only committed part files; after a failure nothing is
// duplicated and nothing is lost. format renders one value (a newline is
// appended).
func FileSink[T any](s *Stream[T], dir string, format func(T) []byte) *Sink {
	// Once the job finished, in-progress files of checkpoints that never
	// completed (left by failed attempts) can never be committed.
	s.env.finalCommits().AddCleanup(func() error {
		olds, _ := filepath.Glob(filepath.Join(dir, ".part-*.inprogress"))
		var errs []error
		for _, o := range olds {
			errs = append(errs, os.Remove(o))
		}
		return errors.Join(errs...)
	})
	return TwoPhaseCommitSink(s, codec.String(), func(sub, par int) (TwoPhaseCommitter[T, string], error) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("weir: file sink: %w", err)
		}
		return &fileCommitter[T]{dir: dir, sub: sub, format: format, open: map[string]*openPart{}}, nil
	}).Name("file sink")
}

type openPart struct {
	f *os.File
	w *bufio.Writer
}

type fileCommitter[T any] struct {
	dir    string
	sub    int
	format func(T) []byte
	open   map[string]*openPart
}

func (c *fileCommitter[T]) inProgress(name string) string {
	return filepath.Join(c.dir, "."+name+".inprogress")
}

func (c *fileCommitter[T]) Begin() (string, error) {
	name := fmt.Sprintf("part-%d-%s", c.sub, uuid.NewString())
	f, err := os.OpenFile(c.inProgress(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	c.open[name] = &openPart{f: f, w: bufio.NewWriterSize(f, 64<<10)}
	return name, nil
}

func (c *fileCommitter[T]) Write(name string, v T) error {
	p := c.open[name]
	if p == nil {
		return fmt.Errorf("weir: file sink: transaction %s is not open", name)
	}
	if _, err := p.w.Write(c.format(v)); err != nil {
		return err
	}
	return p.w.WriteByte('\n')
}

func (c *fileCommitter[T]) PreCommit(name string) error {
	p := c.open[name]
	if p == nil {
		return nil // already pre-committed
	}
	delete(c.open, name)
	if err := p.w.Flush(); err != nil {
		p.f.Close()
		return err
	}
	if err := p.f.Sync(); err != nil {
		p.f.Close()
		return err
	}
	return p.f.Close()
}

// Commit renames the pre-committed file; it is idempotent.
func (c *fileCommitter[T]) Commit(name string) error {
	err := os.Rename(c.inProgress(name), filepath.Join(c.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(c.dir, name)); serr == nil {
			return nil // committed before
		}
	}
	if err != nil {
		return err
	}
	d, err := os.Open(c.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (c *fileCommitter[T]) Abort(name string) error {
	if p := c.open[name]; p != nil {
		p.f.Close()
		delete(c.open, name)
	}
	err := os.Remove(c.inProgress(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// FromFile returns the lines of a file (without their newline) as a
// replayable source: subtask i of p reads lines i, i+p, …, and its position
// (byte offset and line number) is checkpointed, so after a failure it
// resumes exactly where the restored checkpoint was taken.
func FromFile(env *Environment, path string) *Stream[string] {
	return fromReader(env, "file source", "file source "+filepath.Base(path), func(sub, par int) (SourceReader[string], error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		return &lineReader{f: f, r: bufio.NewReaderSize(f, 64<<10), sub: int64(sub), par: int64(par), path: filepath.Clean(path)}, nil
	})
}

type lineReader struct {
	f        *os.File
	r        *bufio.Reader
	offset   int64 // bytes consumed
	line     int64 // index of the next line
	sub, par int64
	done     bool
	path     string // as FromFile was given it, cleaned
	// The checksum of the bytes before offset tailAt (see tailWindow),
	// computed at most once per offset; at the end, before the file closes.
	tail   uint32
	tailAt int64
}

// tailWindow is how many bytes before a file source's offset its position
// holds the checksum of (CRC-32C): a restore onto a file replaced or
// rewritten under the path (a rotated log) finds other bytes there and is
// refused, where reading on from the old offset would skip or repeat
// lines; a file that only grew has the same bytes and restores.
const tailWindow = 256

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// tailSum returns the checksum of the tailWindow bytes (fewer at the
// file's start) before offset off of the open file.
func (r *lineReader) tailSum(off int64) (uint32, error) {
	if off == r.tailAt {
		return r.tail, nil // also the start: the checksum of no bytes, 0
	}
	from := max(0, off-tailWindow)
	buf := make([]byte, off-from)
	if _, err := r.f.ReadAt(buf, from); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%w: file source %s: the file holds fewer than the checkpoint's %d bytes (truncated or replaced)",
				ErrSourceChanged, r.path, off)
		}
		return 0, fmt.Errorf("weir: file source %s: %w", r.path, err)
	}
	r.tail, r.tailAt = crc32.Checksum(buf, castagnoli), off
	return r.tail, nil
}

// ReaderIdentity: the positions are offsets into the file at path.
func (r *lineReader) ReaderIdentity() string { return "file " + r.path }

func (r *lineReader) Next() (string, bool, error) {
	for !r.done {
		s, err := r.r.ReadString('\n')
		r.offset += int64(len(s))
		if err == io.EOF {
			r.done = true
			// The last position's checksum, while the file is open.
			_, serr := r.tailSum(r.offset)
			r.f.Close()
			if serr != nil {
				return "", false, serr
			}
			if s == "" {
				break
			}
		} else if err != nil {
			return "", false, err
		}
		mine := r.line%r.par == r.sub
		r.line++
		if mine {
			return strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r"), true, nil
		}
	}
	return "", false, nil
}

// Position is the byte offset, the line number and the checksum of the
// bytes before the offset (version 2; version 1 had no checksum).
func (r *lineReader) Position() ([]byte, error) {
	sum, err := r.tailSum(r.offset)
	if err != nil {
		return nil, err
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(r.offset))
	b = binary.BigEndian.AppendUint64(b, uint64(r.line))
	return binary.BigEndian.AppendUint32(b, sum), nil
}

func (r *lineReader) Seek(pos []byte) error {
	if len(pos) != 16 && len(pos) != 20 {
		return fmt.Errorf("weir: file source position of %d bytes", len(pos))
	}
	off := int64(binary.BigEndian.Uint64(pos))
	if off < 0 {
		return fmt.Errorf("weir: file source position at offset %d", off)
	}
	if len(pos) == 20 {
		sum, err := r.tailSum(off)
		if err != nil {
			return err
		}
		if want := binary.BigEndian.Uint32(pos[16:]); sum != want {
			return fmt.Errorf("%w: file source %s: the bytes before the checkpoint's offset %d are not those the checkpoint read "+
				"(the file was replaced or rewritten): reading on from there would skip or repeat lines; give the source a new "+
				"UID to read the file from its start", ErrSourceChanged, r.path, off)
		}
	}
	if _, err := r.f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	r.offset, r.line = off, int64(binary.BigEndian.Uint64(pos[8:]))
	r.r.Reset(r.f)
	return nil
}
