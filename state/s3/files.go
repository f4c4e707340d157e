package s3

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/minio/minio-go/v7"

	"github.com/weirstream/weir/state"
)

// writer streams one object: it buffers up to PartSize bytes, sends a
// file that fits in one PUT, and a larger one as a multipart upload whose
// parts go up as they fill.
type writer struct {
	s        *Storage
	rel, key string
	buf      []byte
	sum      *xxhash.Digest
	hdr, n   int64
	uploadID string
	parts    []minio.CompletePart
	err      error
	done     bool
	ok       bool // closed successfully
}

func (s *Storage) newWriter(rel string) *writer {
	return &writer{s: s, rel: rel, key: s.place + rel, sum: xxhash.New()}
}

func (w *writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.done {
		return 0, errors.New("s3: write after close")
	}
	n := 0
	for len(p) > 0 {
		room := int(w.s.cfg.PartSize) - len(w.buf)
		c := min(room, len(p))
		w.buf = append(w.buf, p[:c]...)
		_, _ = w.sum.Write(p[:c])
		w.n += int64(c)
		n += c
		p = p[c:]
		if len(w.buf) == int(w.s.cfg.PartSize) {
			if err := w.flushPart(); err != nil {
				w.err = err
				return n, err
			}
		}
	}
	return n, nil
}

// flushPart sends the buffer as the next part of the multipart upload,
// starting the upload with the first.
func (w *writer) flushPart() error {
	ctx, cancel := w.s.ctx()
	defer cancel()
	if w.uploadID == "" {
		id, err := w.s.core.NewMultipartUpload(ctx, w.s.bucket, w.key, minio.PutObjectOptions{ContentType: "application/octet-stream"})
		if err != nil {
			return fmt.Errorf("s3: start upload of %s: %w", w.s.url(w.key), w.s.describe(err))
		}
		w.uploadID = id
	}
	num := len(w.parts) + 1
	part, err := w.s.core.PutObjectPart(ctx, w.s.bucket, w.key, w.uploadID, num, bytes.NewReader(w.buf), int64(len(w.buf)), minio.PutObjectPartOptions{DisableContentSha256: true})
	if err != nil {
		return fmt.Errorf("s3: upload part %d of %s: %w", num, w.s.url(w.key), w.s.describe(err))
	}
	w.parts = append(w.parts, minio.CompletePart{PartNumber: num, ETag: part.ETag})
	w.buf = w.buf[:0]
	return nil
}

func (w *writer) Close() (state.StreamHandle, error) {
	if w.done {
		return state.StreamHandle{}, errors.New("s3: writer already closed")
	}
	w.done = true
	err := w.err
	if err == nil {
		err = w.finish()
	}
	if err != nil {
		w.err = err
		w.abortUpload()
		return state.StreamHandle{}, err
	}
	w.ok, w.buf = true, nil
	return state.StreamHandle{Path: w.rel, Size: w.n - w.hdr, Checksum: w.sum.Sum64()}, nil
}

func (w *writer) finish() error {
	if w.uploadID == "" {
		ctx, cancel := w.s.ctx()
		defer cancel()
		_, err := w.s.core.PutObject(ctx, w.s.bucket, w.key, bytes.NewReader(w.buf), int64(len(w.buf)), "", "",
			minio.PutObjectOptions{ContentType: "application/octet-stream"})
		if err != nil {
			return fmt.Errorf("s3: put %s: %w", w.s.url(w.key), w.s.describe(err))
		}
		return nil
	}
	if len(w.buf) > 0 {
		if err := w.flushPart(); err != nil {
			return err
		}
	}
	ctx, cancel := w.s.ctx()
	defer cancel()
	if _, err := w.s.core.CompleteMultipartUpload(ctx, w.s.bucket, w.key, w.uploadID, w.parts, minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("s3: complete upload of %s: %w", w.s.url(w.key), w.s.describe(err))
	}
	w.uploadID = ""
	return nil
}

// abortUpload aborts an unfinished multipart upload, so that its parts do
// not linger (a crashed process leaves them to the bucket's lifecycle
// rule for incomplete uploads).
func (w *writer) abortUpload() {
	if w.uploadID == "" {
		return
	}
	ctx, cancel := w.s.ctx()
	defer cancel()
	_ = w.s.core.AbortMultipartUpload(ctx, w.s.bucket, w.key, w.uploadID)
	w.uploadID = ""
}

// Abort discards the file: an unfinished upload is aborted; nothing was
// visible. After a successful Close it does nothing (the file is the
// checkpoint's; Discard removes it).
func (w *writer) Abort() error {
	w.done = true
	w.buf = nil
	if !w.ok {
		w.abortUpload()
	}
	return nil
}

// object reads an object by ranged GETs of ReadAhead bytes, keeping the
// last window.
type object struct {
	s    *Storage
	key  string
	size int64

	mu  sync.Mutex
	win []byte
	off int64 // of win
}

func (o *object) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("s3: negative offset")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for n < len(p) {
		at := off + int64(n)
		if at >= o.size {
			return n, io.EOF
		}
		if at < o.off || at >= o.off+int64(len(o.win)) {
			if err := o.fetchLocked(at); err != nil {
				return n, err
			}
		}
		n += copy(p[n:], o.win[at-o.off:])
	}
	return n, nil
}

func (o *object) fetchLocked(at int64) error {
	end := min(at+int64(o.s.cfg.ReadAhead), o.size)
	var opts minio.GetObjectOptions
	if err := opts.SetRange(at, end-1); err != nil {
		return err
	}
	ctx, cancel := o.s.ctx()
	defer cancel()
	rc, _, _, err := o.s.core.GetObject(ctx, o.s.bucket, o.key, opts)
	if err != nil {
		if isNotFound(err) {
			return &state.CorruptError{Path: o.s.url(o.key), Reason: "missing", Err: err}
		}
		return fmt.Errorf("s3: get %s: %w", o.s.url(o.key), o.s.describe(err))
	}
	defer rc.Close()
	if cap(o.win) < int(end-at) {
		o.win = make([]byte, end-at)
	}
	o.win = o.win[:end-at]
	if _, err := io.ReadFull(rc, o.win); err != nil {
		o.win = o.win[:0]
		return fmt.Errorf("s3: read %s at %d: %w", o.s.url(o.key), at, err)
	}
	o.off = at
	return nil
}

// drop forgets the window (keeping its memory).
func (o *object) drop() {
	o.mu.Lock()
	o.win = o.win[:0]
	o.mu.Unlock()
}
