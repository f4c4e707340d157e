package parquet

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// hiddenName is the name of part file name while it is in progress or
// pending: a leading '.' hides it from readers of the directory.
func hiddenName(name string) string { return "." + name + ".inprogress" }

// parseHidden splits the hidden name of a part file of prefix and suffix
// into the uid and subtask that wrote it.
func parseHidden(name, prefix, suffix string) (uid string, sub int, ok bool) {
	s, ok := strings.CutPrefix(name, "."+prefix+"-")
	if !ok {
		return "", 0, false
	}
	if s, ok = strings.CutSuffix(s, suffix+".inprogress"); !ok {
		return "", 0, false
	}
	// uid-subtask-counter, the uid holding dashes itself.
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return "", 0, false
	}
	if _, err := strconv.ParseUint(s[i+1:], 10, 63); err != nil {
		return "", 0, false
	}
	s = s[:i]
	j := strings.LastIndexByte(s, '-')
	if j <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(s[j+1:], 10, 31)
	if err != nil {
		return "", 0, false
	}
	return s[:j], int(n), true
}

// parseFinal is parseHidden for a committed name.
func parseFinal(name, prefix, suffix string) (uid string, sub int, ok bool) {
	return parseHidden(hiddenName(name), prefix, suffix)
}

// cleanup removes the hidden part files that earlier attempts and runs
// left in Dir: in-progress files of a failed attempt and pending files of
// checkpoints that never completed. It runs once per attempt, after the
// first checkpoint of the attempt completed (so every subtask has
// committed the pending files of the checkpoint it restored), or at the
// start of a job without checkpoints. Subtask s of p removes the files of
// the subtasks k with k mod p = s other than its own of this attempt:
// files of subtask k < p, k ≠ s, are never its, and those of k ≥ p come
// from a run at a higher parallelism. A failure is logged, not returned:
// leftovers are hidden, they cost only space.
func (c *committer[T]) cleanup() {
	c.cleaned = true
	if c.obj != nil {
		c.cleanupObjects()
		return
	}
	var removed int
	err := filepath.WalkDir(c.cfg.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		uid, k, ok := parseHidden(d.Name(), c.cfg.PartPrefix, c.cfg.PartSuffix)
		if !ok || k%c.par != c.sub || (k == c.sub && uid == c.uid) {
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed++
		return nil
	})
	if err != nil {
		c.log.Warn("removing part files left by earlier attempts", zap.Error(err))
	}
	if removed > 0 {
		c.log.Info("removed part files left by earlier attempts", zap.Int("files", removed))
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// writable reports whether this process may create files in dir, by
// creating one (a hidden probe, removed at once): permission bits, ACLs
// and read-only mounts all answer the same way as they will for the sink.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".weir-parquet-probe-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// txnCodec encodes a *txn: the number of files (uvarint), then each
// path's length (uvarint) and bytes, slash-separated; on object storage
// then each file's upload: its ID (length, bytes), the number of its
// parts and each part's ETag (length, bytes).
type txnCodec struct{}

func (txnCodec) Append(dst []byte, t *txn) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(t.Files)))
	for _, f := range t.Files {
		f = filepath.ToSlash(f)
		dst = binary.AppendUvarint(dst, uint64(len(f)))
		dst = append(dst, f...)
	}
	for _, u := range t.Uploads {
		dst = appendString(dst, u.ID)
		dst = binary.AppendUvarint(dst, uint64(len(u.ETags)))
		for _, e := range u.ETags {
			dst = appendString(dst, e)
		}
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// readString reads what appendString wrote.
func readString(src []byte) (string, []byte, bool) {
	l, k := binary.Uvarint(src)
	if k <= 0 || l > uint64(len(src)-k) {
		return "", nil, false
	}
	return string(src[k : k+int(l)]), src[k+int(l):], true
}

var errCorruptTxn = errors.New("parquet: corrupt sink transaction")

func (txnCodec) Decode(src []byte) (*txn, error) {
	n, k := binary.Uvarint(src)
	if k <= 0 || n > uint64(len(src)) {
		return nil, errCorruptTxn
	}
	src = src[k:]
	t := &txn{Files: make([]string, 0, n)}
	for range n {
		l, k := binary.Uvarint(src)
		if k <= 0 || l > uint64(len(src)-k) {
			return nil, errCorruptTxn
		}
		f := filepath.FromSlash(string(src[k : k+int(l)]))
		if !filepath.IsLocal(f) {
			return nil, errCorruptTxn
		}
		t.Files = append(t.Files, f)
		src = src[k+int(l):]
	}
	if len(src) == 0 {
		return t, nil
	}
	t.Uploads = make([]*upload, 0, n)
	for range n {
		u := &upload{}
		var ok bool
		if u.ID, src, ok = readString(src); !ok {
			return nil, errCorruptTxn
		}
		m, k := binary.Uvarint(src)
		if k <= 0 || m > uint64(len(src)) {
			return nil, errCorruptTxn
		}
		src = src[k:]
		for range m {
			var e string
			if e, src, ok = readString(src); !ok {
				return nil, errCorruptTxn
			}
			u.ETags = append(u.ETags, e)
		}
		t.Uploads = append(t.Uploads, u)
	}
	if len(src) != 0 {
		return nil, errCorruptTxn
	}
	return t, nil
}
