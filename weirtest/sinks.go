package weirtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// Output registers a checker for output the harness cannot see by itself
// (the user's own sink): after each run, read returns the records the run
// committed. It is called once per run, after the job ended.
func (r *R) Output(name string, read func() ([]Record, error)) {
	r.outputs = append(r.outputs, output{name: name, read: read})
}

// output is one checked output of a job.
type output struct {
	name string
	read func() ([]Record, error)
}

// render turns v into a record; orderKey may be nil.
func render[T any](v T, orderKey func(T) string) Record {
	r := Record{Value: fmt.Sprint(v)}
	if orderKey != nil {
		r.Key = orderKey(v)
	}
	return r
}

// Collect attaches a weir.Collect sink to s and checks what it collected.
// orderKey, if not nil, declares the order to check: the values of one key
// must arrive in the fault-free run's order. Values are compared as
// fmt.Sprint renders them.
func Collect[T any](r *R, s *weir.Stream[T], orderKey func(T) string) *weir.Sink {
	c, sink := weir.Collect(s)
	r.Output(fmt.Sprintf("collect#%d", len(r.outputs)+1), func() ([]Record, error) {
		vs := c.Values()
		rs := make([]Record, len(vs))
		for i, v := range vs {
			rs[i] = render(v, orderKey)
		}
		return rs, nil
	})
	return sink
}

// FileSink attaches a weir.FileSink writing into a directory of the run
// (removed after it) and checks the lines of its committed part files.
// Part files carry no order, so none is checked.
func FileSink[T any](r *R, s *weir.Stream[T], format func(T) []byte) *weir.Sink {
	dir := filepath.Join(r.TempDir(), fmt.Sprintf("filesink%d", len(r.outputs)+1))
	sink := weir.FileSink(s, dir, format)
	r.Output(fmt.Sprintf("filesink#%d", len(r.outputs)+1), func() ([]Record, error) {
		return readParts(dir)
	})
	return sink
}

// readParts reads the lines of the committed part files of dir.
func readParts(dir string) ([]Record, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var rs []Record
	for _, e := range es {
		if !strings.HasPrefix(e.Name(), "part-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			rs = append(rs, Record{Value: sc.Text()})
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// TwoPhaseCommitSink attaches a weir.TwoPhaseCommitSink whose committers
// are wrapped in recording ones, and checks the values of the transactions
// committed: a value counts once its transaction's first Commit returned
// nil. Transaction handles must tell transactions apart when rendered with
// fmt.Sprint (as they must to be restored). orderKey is as for Collect;
// a key's values are in the order of their transactions' commits.
func TwoPhaseCommitSink[T, Txn any](r *R, s *weir.Stream[T], txnCodec codec.Codec[Txn],
	newCommitter func(subtask, parallelism int) (weir.TwoPhaseCommitter[T, Txn], error), orderKey func(T) string) *weir.Sink {
	rec := &recorder{}
	rec.mu.open = map[string][]Record{}
	rec.mu.committed = map[string]bool{}
	sink := weir.TwoPhaseCommitSink(s, txnCodec, func(sub, par int) (weir.TwoPhaseCommitter[T, Txn], error) {
		c, err := newCommitter(sub, par)
		if err != nil {
			return nil, err
		}
		return &recordingCommitter[T, Txn]{c: c, rec: rec, orderKey: orderKey, h: r.h}, nil
	})
	r.Output(fmt.Sprintf("2pc#%d", len(r.outputs)+1), func() ([]Record, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.mu.out, nil
	})
	return sink
}

// recorder keeps what the committers of one sink wrote and committed.
type recorder struct {
	mu struct {
		sync.Mutex
		open      map[string][]Record // written, not committed, by transaction
		committed map[string]bool
		out       []Record // committed, in commit order
	}
}

// recordingCommitter records what its committer writes and commits.
type recordingCommitter[T, Txn any] struct {
	c        weir.TwoPhaseCommitter[T, Txn]
	rec      *recorder
	orderKey func(T) string
	h        *injector
}

func txnKey[Txn any](t Txn) string { return fmt.Sprint(t) }

func (c *recordingCommitter[T, Txn]) Begin() (Txn, error) { return c.c.Begin() }

func (c *recordingCommitter[T, Txn]) Write(txn Txn, v T) error {
	if err := c.c.Write(txn, v); err != nil {
		return err
	}
	k := txnKey(txn)
	c.rec.mu.Lock()
	c.rec.mu.open[k] = append(c.rec.mu.open[k], render(v, c.orderKey))
	c.rec.mu.Unlock()
	return nil
}

func (c *recordingCommitter[T, Txn]) PreCommit(txn Txn) error { return c.c.PreCommit(txn) }

func (c *recordingCommitter[T, Txn]) Commit(txn Txn) error {
	if err := c.c.Commit(txn); err != nil {
		return err
	}
	k := txnKey(txn)
	c.rec.mu.Lock()
	if !c.rec.mu.committed[k] {
		c.rec.mu.committed[k] = true
		c.rec.mu.out = append(c.rec.mu.out, c.rec.mu.open[k]...)
		delete(c.rec.mu.open, k)
	}
	c.rec.mu.Unlock()
	return c.h.committed()
}

func (c *recordingCommitter[T, Txn]) Abort(txn Txn) error {
	if err := c.c.Abort(txn); err != nil {
		return err
	}
	k := txnKey(txn)
	c.rec.mu.Lock()
	delete(c.rec.mu.open, k)
	c.rec.mu.Unlock()
	return nil
}
