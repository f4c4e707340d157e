package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/connectors/internal/txnname"
)

// committer is one sink subtask's TwoPhaseCommitter, on one connection.
// ExactlyOnce: the rows of a transaction are buffered, BatchSize at a
// time, and sent with COPY into a transaction begun at its first batch;
// the pre-commit prepares it. Upsert: each batch is copied into a
// temporary table and upserted from there, in a transaction of its own.
type committer[T any] struct {
	cfg      *SinkConfig[T]
	conf     *pgx.ConnConfig
	table    pgx.Identifier
	sub, par int
	log      *zap.Logger

	// conn writes the rows (nil until needed, or after it broke); ctl
	// commits and rolls back prepared transactions (COMMIT PREPARED
	// cannot run on a connection in a transaction, and conn may be in
	// one when a checkpoint completes).
	conn, ctl *pgx.Conn
	tmpConn   *pgx.Conn       // Upsert: the connection the temporary table is on
	ctx       context.Context // the task's (SetContext), nil: none
	closed    bool
	cleaned   bool // lingering transactions rolled back
	// oldPrefixes are the transaction prefixes of restored transactions
	// other than TransactionPrefix (the prefix changed across the
	// restore): their lingering transactions are rolled back too.
	oldPrefixes txnname.OldPrefixes

	// committing is the result of the COMMIT PREPARED running on ctl in
	// the background (nil: none). Every call but Write waits for it
	// first: PreCommit above all, so that a checkpoint completes only
	// once the commits of the checkpoints before it are done, and a
	// commit that failed fails the job before a checkpoint without its
	// transaction exists.
	committing chan error

	open   *txn // ExactlyOnce: the open transaction
	begun  bool // its BEGIN was sent
	buf    []T  // rows not sent yet
	src    batchSource[T]
	upsert string // Upsert: the INSERT … SELECT … ON CONFLICT statement
}

var (
	_ weir.TwoPhaseCommitter[int, *txn] = (*committer[int])(nil)
	_ weir.CheckpointBeginner[*txn]     = (*committer[int])(nil)
	_ weir.ContextSetter                = (*committer[int])(nil)
)

// batchSource hands the buffered values to COPY, one reused row at a
// time.
type batchSource[T any] struct {
	c   *committer[T]
	i   int
	row []any
}

func (s *batchSource[T]) Next() bool { s.i++; return s.i < len(s.c.buf) }

func (s *batchSource[T]) Values() (row []any, err error) {
	// COPY calls this from a goroutine of its own: a panic of the user's
	// function becomes the COPY's error instead of crashing the process.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("postgres: sink %s: Row panicked on a value: %v", s.c.cfg.Table, r)
		}
	}()
	clear(s.row)
	if err := s.c.cfg.Row(s.c.buf[s.i], s.row); err != nil {
		return nil, fmt.Errorf("postgres: sink %s: Row: %w", s.c.cfg.Table, err)
	}
	return s.row, nil
}

func (s *batchSource[T]) Err() error { return nil }

// SetContext implements weir.ContextSetter.
func (c *committer[T]) SetContext(ctx context.Context) { c.ctx = ctx }

// requestCtx bounds one round of statements by RequestTimeout and, until
// Close, by the task's context.
func (c *committer[T]) requestCtx() (context.Context, context.CancelFunc) {
	parent := c.ctx
	if parent == nil || c.closed {
		parent = context.Background()
	}
	return context.WithTimeout(parent, c.cfg.RequestTimeout)
}

func (c *committer[T]) errorf(format string, args ...any) error {
	return fmt.Errorf("postgres: sink %s: "+format, append([]any{c.cfg.Table}, args...)...)
}

// control returns the connection for prepared transactions.
func (c *committer[T]) control(ctx context.Context) (*pgx.Conn, error) { return c.open1(ctx, &c.ctl) }

func (c *committer[T]) open1(ctx context.Context, conn **pgx.Conn) (*pgx.Conn, error) {
	if *conn != nil && !(*conn).IsClosed() {
		return *conn, nil
	}
	closeConn(conn)
	cn, err := pgx.ConnectConfig(ctx, c.conf)
	if err != nil {
		return nil, c.errorf("connecting: %w", err)
	}
	*conn = cn
	return cn, nil
}

// closeConn closes *conn (the server rolls back its open transaction, if
// any) and sets it to nil.
func closeConn(conn **pgx.Conn) {
	if *conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = (*conn).Close(ctx)
	*conn = nil
}

func (c *committer[T]) Begin() (*txn, error) { return c.BeginAfter(0) }

// BeginAfter starts transaction prefix-subtask-(last+1) (ExactlyOnce; it
// begins on the server with its first batch). The first call rolls back
// the prepared transactions failed attempts left.
func (c *committer[T]) BeginAfter(last barrier.CheckpointID) (*txn, error) {
	if err := c.awaitCommit(); err != nil {
		return nil, err
	}
	c.buf = c.buf[:0]
	if c.cfg.Mode != ExactlyOnce {
		return &txn{}, nil
	}
	if !c.cleaned {
		if err := c.rollbackLingering(last); err != nil {
			return nil, err
		}
		c.cleaned = true
	}
	c.open = &txn{TxnHandle: weir.TxnHandle{ID: gid(c.cfg.TransactionPrefix, c.sub, uint64(last)+1)}}
	c.begun = false
	return c.open, nil
}

func gid(prefix string, sub int, ckpt uint64) string {
	return prefix + "-" + strconv.Itoa(sub) + "-" + strconv.FormatUint(ckpt, 10)
}

// parseGID splits prefix-subtask-checkpoint.
func parseGID(prefix, id string) (sub int, ckpt uint64, ok bool) {
	rest, found := strings.CutPrefix(id, prefix+"-")
	if !found {
		return 0, 0, false
	}
	s, k, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	sub, err := strconv.Atoi(s)
	if err != nil || sub < 0 || strconv.Itoa(sub) != s {
		return 0, 0, false
	}
	ckpt, err = strconv.ParseUint(k, 10, 64)
	return sub, ckpt, err == nil
}

func (c *committer[T]) Write(_ *txn, v T) error {
	c.buf = append(c.buf, v)
	if len(c.buf) >= c.cfg.BatchSize {
		return c.flush()
	}
	return nil
}

// flush sends the buffered rows: into the open transaction (ExactlyOnce)
// or upserted in a transaction of their own (Upsert).
func (c *committer[T]) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	ctx, cancel := c.requestCtx()
	defer cancel()
	var err error
	if c.cfg.Mode == Upsert {
		err = c.flushUpsert(ctx)
	} else {
		err = c.flushTxn(ctx)
	}
	if err != nil {
		return err
	}
	c.buf = c.buf[:0]
	return nil
}

func (c *committer[T]) flushTxn(ctx context.Context) error {
	if !c.begun {
		// Nothing is lost yet: a connection that broke since the last
		// transaction is replaced.
		err := c.retry(ctx, &c.conn, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "BEGIN")
			return err
		})
		if err != nil {
			return c.errorf("transaction %s: begin: %w", c.open.ID, err)
		}
		c.begun = true
	}
	if err := c.copy(ctx, c.table); err != nil {
		return c.errorf("transaction %s: %w", c.open.ID, err)
	}
	return nil
}

var copyLine = regexp.MustCompile(`COPY [^,]*, line (\d+)`)

// copy sends the buffer into table with COPY. An error of a row says
// which: its place in the batch and the value.
func (c *committer[T]) copy(ctx context.Context, table pgx.Identifier) error {
	c.src.i = -1
	_, err := c.conn.CopyFrom(ctx, table, c.cfg.Columns, &c.src)
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if m := copyLine.FindStringSubmatch(pe.Where); m != nil {
			if n, _ := strconv.Atoi(m[1]); n >= 1 && n <= len(c.buf) {
				return fmt.Errorf("row %d of a batch of %d, value %s: %w", n, len(c.buf), describe(c.buf[n-1]), describeErr(pe))
			}
		}
		return describeErr(pe)
	}
	return err
}

// describe formats a value for an error message, cut at 200 bytes.
func describe(v any) string {
	s := fmt.Sprintf("%+v", v)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// describeErr adds the server's detail (which names the offending key or
// row) to its message.
func describeErr(pe *pgconn.PgError) error {
	if pe.Detail == "" {
		return pe
	}
	return fmt.Errorf("%w: %s", pe, pe.Detail)
}

// PreCommit sends what is buffered (Upsert: the checkpoint's flush) and,
// ExactlyOnce, prepares the transaction under its name, recording its
// transaction id first (to tell, after a failure, a transaction committed
// already from one rolled back).
func (c *committer[T]) PreCommit(t *txn) error {
	if err := c.awaitCommit(); err != nil {
		return err
	}
	if c.cfg.Mode == Upsert {
		return c.flush()
	}
	if t != c.open {
		return nil // pre-committed already
	}
	if err := c.flush(); err != nil {
		return err
	}
	if !c.begun {
		t.Empty, t.PreCommitted = true, true
		c.open = nil
		return nil
	}
	ctx, cancel := c.requestCtx()
	defer cancel()
	var xid string
	if err := c.conn.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
		return c.errorf("transaction %s: reading its id: %w", t.ID, err)
	}
	x, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		return c.errorf("transaction %s: id %q: %w", t.ID, xid, err)
	}
	if _, err := c.conn.Exec(ctx, "PREPARE TRANSACTION "+quote(t.ID)); err != nil {
		return c.errorf("preparing transaction %s: %w", t.ID, err)
	}
	t.XID, t.PreCommitted = x, true
	c.open, c.begun = nil, false
	return nil
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Commit commits a prepared transaction, retrying on a new connection
// while the server is unreachable. One that is no longer prepared was
// committed already, unless the server says it was rolled back
// (ErrTransactionLost).
func (c *committer[T]) Commit(t *txn) error {
	c.noteRestored(t)
	if c.cfg.Mode != ExactlyOnce || t.Empty || !t.PreCommitted {
		return nil
	}
	if err := c.awaitCommit(); err != nil {
		return err
	}
	ctx, cancel := c.requestCtx()
	if c.closed || c.ctx == nil {
		// The commits at the end of the job: nothing follows to wait.
		defer cancel()
		return c.endPrepared(ctx, t, true)
	}
	// The commit runs on ctl while the task goes on writing on conn: the
	// next call waits for it.
	done := make(chan error, 1)
	c.committing = done
	go func() {
		defer cancel()
		done <- c.endPrepared(ctx, t, true)
	}()
	return nil
}

// awaitCommit waits for the background commit, if any, and returns its
// error.
func (c *committer[T]) awaitCommit() error {
	if c.committing == nil {
		return nil
	}
	err := <-c.committing
	c.committing = nil
	return err
}

// Abort rolls back a transaction: the open one (closing the connection
// if that fails: the server then rolls it back), or a prepared one
// (gone already is fine). A restored transaction that was open at the
// checkpoint was never prepared under its name by the attempt that
// checkpointed it; a later attempt may have, and the lingering cleanup of
// the subtask that answers for the name rolls it back before that subtask
// reuses the name: rolling it back from here could hit the new
// transaction of that name.
// noteRestored records the prefix of a restored transaction's name if the
// sink's prefix changed since: the failed attempt may have left prepared
// transactions under the old one, which would otherwise hold their rows'
// locks for good.
func (c *committer[T]) noteRestored(t *txn) {
	if c.cleaned || c.cfg.Mode != ExactlyOnce {
		return
	}
	if p, ok := c.oldPrefixes.Note(c.cfg.TransactionPrefix, t.ID); ok {
		c.log.Warn("the sink's TransactionPrefix changed since the checkpoint it restores; rolling back the old prefix's lingering transactions too",
			zap.String("old", p), zap.String("new", c.cfg.TransactionPrefix))
	}
}

func (c *committer[T]) Abort(t *txn) error {
	c.noteRestored(t)
	// A failed background commit is reported, but the abort goes on.
	cerr := c.awaitCommit()
	return errors.Join(cerr, c.abort(t))
}

func (c *committer[T]) abort(t *txn) error {
	if c.cfg.Mode != ExactlyOnce {
		c.buf = c.buf[:0]
		return nil
	}
	if t == c.open {
		c.open, c.buf = nil, c.buf[:0]
		if !c.begun {
			return nil
		}
		ctx, cancel := c.requestCtx()
		defer cancel()
		if _, err := c.conn.Exec(ctx, "ROLLBACK"); err != nil {
			closeConn(&c.conn) // the server rolls it back
		}
		c.begun = false
		return nil
	}
	if t.Empty || !t.PreCommitted {
		return nil
	}
	ctx, cancel := c.requestCtx()
	defer cancel()
	return c.endPrepared(ctx, t, false)
}

// endPrepared runs COMMIT PREPARED or ROLLBACK PREPARED, retrying with a
// backoff on a new connection while the server is unreachable, until
// RequestTimeout or the task's end.
func (c *committer[T]) endPrepared(ctx context.Context, t *txn, commit bool) error {
	stmt, verb := "COMMIT PREPARED ", "committing"
	if !commit {
		stmt, verb = "ROLLBACK PREPARED ", "rolling back"
	}
	stmt += quote(t.ID)
	err := c.retry(ctx, &c.ctl, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, stmt)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42704" { // undefined_object: not prepared (any more)
			if !commit {
				return nil
			}
			return c.committedAlready(ctx, conn, t)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrTransactionLost) {
		return c.errorf("%s transaction %s: %w", verb, t.ID, err)
	}
	return err
}

// retry runs fn on *conn (connected first if needed) until it succeeds,
// fails with an error the server answered, or ctx ends; after a failure
// of the connection it closes *conn and waits a backoff. For statements
// that lose nothing when repeated on a new connection.
func (c *committer[T]) retry(ctx context.Context, conn **pgx.Conn, fn func(*pgx.Conn) error) error {
	backoff := 10 * time.Millisecond
	for {
		cn, err := c.open1(ctx, conn)
		if err != nil {
			if !connectRetriable(err) {
				return err
			}
		} else {
			if err = fn(cn); err == nil {
				return nil
			}
			if ctx.Err() != nil || (!cn.IsClosed() && !retriable(err)) {
				return err
			}
			closeConn(conn)
		}
		c.log.Debug("retrying on a new connection", zap.Error(err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", context.Cause(ctx), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// committedAlready checks, by its transaction id, that a transaction no
// longer prepared was committed.
func (c *committer[T]) committedAlready(ctx context.Context, conn *pgx.Conn, t *txn) error {
	var status *string
	if err := conn.QueryRow(ctx, "SELECT pg_xact_status($1::text::xid8)", strconv.FormatUint(t.XID, 10)).Scan(&status); err != nil {
		return c.errorf("transaction %s (id %d) is not prepared, and its status is unknown: %w", t.ID, t.XID, err)
	}
	switch {
	case status == nil:
		// Too old for the server to remember: committed long ago (a
		// rolled-back one would have been found out by an earlier run).
		c.log.Warn("a prepared transaction to commit again is too old for the server to tell its status: taken as committed",
			zap.String("gid", t.ID), zap.Uint64("xid", t.XID))
		return nil
	case *status == "committed":
		return nil
	case *status == "aborted":
		return fmt.Errorf("%w: %s (transaction id %d) was rolled back before the job committed it: its rows are lost", ErrTransactionLost, t.ID, t.XID)
	}
	return c.errorf("transaction %s (id %d) is not prepared, and its status is %s", t.ID, t.XID, *status)
}

// rollbackLingering rolls back the prepared transactions of this sink's
// prefix (and of its prefixes before a change, oldPrefixes), in this
// database, that no checkpoint up to last holds: named after a later
// checkpoint, by a subtask index this subtask answers for (index mod
// parallelism), so that the subtasks share the work without touching
// each other's new transactions, even after a rescale.
func (c *committer[T]) rollbackLingering(last barrier.CheckpointID) error {
	ctx, cancel := c.requestCtx()
	defer cancel()
	conn, err := c.control(ctx)
	if err != nil {
		return err
	}
	var done []string
	for _, prefix := range append([]string{c.cfg.TransactionPrefix}, c.oldPrefixes...) {
		rows, err := conn.Query(ctx, `SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1)`,
			prefix+"-")
		if err != nil {
			return c.errorf("listing lingering prepared transactions: %w", err)
		}
		gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return c.errorf("listing lingering prepared transactions: %w", err)
		}
		for _, g := range gids {
			sub, ckpt, ok := parseGID(prefix, g)
			if !ok || sub%c.par != c.sub || ckpt <= uint64(last) {
				continue
			}
			if _, err := conn.Exec(ctx, "ROLLBACK PREPARED "+quote(g)); err != nil {
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "42704" {
					continue // ended meanwhile
				}
				return c.errorf("rolling back lingering transaction %s: %w", g, err)
			}
			done = append(done, g)
		}
	}
	if len(done) > 0 {
		c.log.Info("rolled back lingering prepared transactions", zap.Strings("gids", done))
	}
	return nil
}

// Close closes the connection (the open transaction was aborted before).
func (c *committer[T]) Close() error {
	err := c.awaitCommit()
	c.closed = true
	closeConn(&c.conn)
	closeConn(&c.ctl)
	c.begun = false
	return err
}
