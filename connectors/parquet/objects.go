package parquet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"

	"github.com/weirstream/weir/state/s3"
)

// objectTimeout bounds each request to the object store, its retries
// included.
const objectTimeout = 2 * time.Minute

// objects is the sink's output on object storage (Dir
// "s3://bucket/prefix"). A part file is a multipart upload to its
// committed key, started when the part opens; its bytes go up in parts of
// s3.MinPartSize as they are written, the last one when it rolls, and the
// upload is completed (the object appears, whole) only when the
// checkpoint completes. An aborted transaction's uploads are aborted.
type objects struct {
	core   minio.Core
	tr     *http.Transport // made by the client: closed when the sink is done
	bucket string
	prefix string // the key prefix of Dir: "" or ending in "/"
	url    string // Dir
}

// newObjects returns the object storage of dir, an s3:// URL, with the
// endpoint, region and credentials of the standard environment (as
// s3.FromURL takes them).
func newObjects(dir string) (*objects, error) {
	cfg, err := s3.FromURL(dir, "")
	if err != nil {
		return nil, fmt.Errorf("parquet: sink %s: %w", dir, err)
	}
	cl, tr, err := cfg.Client()
	if err != nil {
		return nil, fmt.Errorf("parquet: sink %s: %w", dir, err)
	}
	o := &objects{core: minio.Core{Client: cl}, tr: tr, bucket: cfg.Bucket, url: dir}
	if cfg.Prefix != "" {
		o.prefix = strings.Trim(cfg.Prefix, "/") + "/"
	}
	return o, nil
}

func (o *objects) key(rel string) string {
	return o.prefix + path.Clean(strings.ReplaceAll(rel, `\`, "/"))
}

func (o *objects) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), objectTimeout)
}

// check reports a bucket that does not exist or refuses the credentials.
func (o *objects) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, objectTimeout)
	defer cancel()
	ok, err := o.core.BucketExists(ctx, o.bucket)
	if err != nil {
		return fmt.Errorf("parquet: sink %s: bucket %s: %w", o.url, o.bucket, err)
	}
	if !ok {
		return fmt.Errorf("parquet: sink %s: bucket %s does not exist at %s", o.url, o.bucket, o.core.EndpointURL().Host)
	}
	// BucketExists may pass anonymously on a public bucket: a listing
	// checks that the credentials are accepted.
	if _, err := o.core.ListObjectsV2(o.bucket, o.prefix, "", "", "/", 1); err != nil {
		return fmt.Errorf("parquet: sink %s: listing (are the credentials accepted?): %w", o.url, err)
	}
	return nil
}

// upload is a part file's multipart upload, as checkpointed: its ID and
// the ETags of its parts, in order.
type upload struct {
	ID    string
	ETags []string
}

// start begins the upload of a part file.
func (o *objects) start(rel string) (*upload, error) {
	ctx, cancel := o.ctx()
	defer cancel()
	id, err := o.core.NewMultipartUpload(ctx, o.bucket, o.key(rel), minio.PutObjectOptions{ContentType: "application/vnd.apache.parquet"})
	if err != nil {
		return nil, fmt.Errorf("parquet: sink %s: start upload of %s: %w", o.url, rel, err)
	}
	return &upload{ID: id}, nil
}

// objectPart is an open part file on object storage: what parquet-go
// writes is buffered and sent as the upload's next part once
// s3.MinPartSize is buffered (every part but the last must be that
// large), the rest when the part rolls.
type objectPart struct {
	o   *objects
	rel string
	up  *upload
	buf []byte
	err error
}

func (w *objectPart) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= s3.MinPartSize {
		if w.err = w.send(); w.err != nil {
			return 0, w.err
		}
	}
	return len(p), nil
}

func (w *objectPart) send() error {
	ctx, cancel := w.o.ctx()
	defer cancel()
	num := len(w.up.ETags) + 1
	p, err := w.o.core.PutObjectPart(ctx, w.o.bucket, w.o.key(w.rel), w.up.ID, num, bytes.NewReader(w.buf), int64(len(w.buf)),
		minio.PutObjectPartOptions{DisableContentSha256: true})
	if err != nil {
		return fmt.Errorf("parquet: sink %s: upload part %d of %s: %w", w.o.url, num, w.rel, err)
	}
	w.up.ETags = append(w.up.ETags, p.ETag)
	w.buf = w.buf[:0]
	return nil
}

// finish sends what is buffered as the last part: the upload is complete
// but for its completion, the commit.
func (w *objectPart) finish() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) > 0 || len(w.up.ETags) == 0 {
		w.err = w.send()
	}
	w.buf = nil
	return w.err
}

func (w *objectPart) discard() { w.buf, w.err = nil, errors.New("parquet: sink: part discarded") }

// commit completes the upload: the object appears under its committed
// key. An upload no longer there was completed before if the object
// exists; otherwise its records are lost.
func (o *objects) commit(rel string, up *upload) error {
	ctx, cancel := o.ctx()
	defer cancel()
	parts := make([]minio.CompletePart, len(up.ETags))
	for i, e := range up.ETags {
		parts[i] = minio.CompletePart{PartNumber: i + 1, ETag: e}
	}
	_, err := o.core.CompleteMultipartUpload(ctx, o.bucket, o.key(rel), up.ID, parts, minio.PutObjectOptions{})
	if err == nil {
		return nil
	}
	if minio.ToErrorResponse(err).Code == minio.NoSuchUpload {
		if _, serr := o.core.StatObject(ctx, o.bucket, o.key(rel), minio.StatObjectOptions{}); serr == nil {
			return nil // committed before
		}
		return fmt.Errorf("parquet: sink %s: the upload of pending part file %s is gone: its records are lost", o.url, rel)
	}
	return fmt.Errorf("parquet: sink %s: commit %s: %w", o.url, rel, err)
}

// abort aborts an upload (gone already is fine).
func (o *objects) abort(rel string, up *upload) error {
	ctx, cancel := o.ctx()
	defer cancel()
	err := o.core.AbortMultipartUpload(ctx, o.bucket, o.key(rel), up.ID)
	if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchUpload {
		return fmt.Errorf("parquet: sink %s: abort the upload of %s: %w", o.url, rel, err)
	}
	return nil
}

// cleanup aborts the uploads of part files earlier attempts and runs left
// under Dir, by the rule of the local cleanup (see committer.cleanup): of
// the subtasks k with k mod p = s, other than this subtask's own of this
// attempt.
func (c *committer[T]) cleanupObjects() {
	o := c.obj
	var aborted int
	err := func() error {
		keyMarker, idMarker := "", ""
		for {
			ctx, cancel := o.ctx()
			res, err := o.core.ListMultipartUploads(ctx, o.bucket, o.prefix, keyMarker, idMarker, "", 1000)
			cancel()
			if minio.ToErrorResponse(err).Code == minio.NoSuchUpload {
				return nil // some stores (gofakes3) say so of a bucket that never had an upload
			}
			if err != nil {
				return err
			}
			for _, u := range res.Uploads {
				uid, k, ok := parseFinal(path.Base(u.Key), c.cfg.PartPrefix, c.cfg.PartSuffix)
				if !ok || k%c.par != c.sub || (k == c.sub && uid == c.uid) {
					continue
				}
				rel := strings.TrimPrefix(u.Key, o.prefix)
				if err := o.abort(rel, &upload{ID: u.UploadID}); err != nil {
					return err
				}
				aborted++
			}
			if !res.IsTruncated {
				return nil
			}
			keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
		}
	}()
	if err != nil {
		c.log.Warn("aborting the uploads earlier attempts left", zap.Error(err))
	}
	if aborted > 0 {
		c.log.Info("aborted the uploads earlier attempts left", zap.Int("uploads", aborted))
	}
}
