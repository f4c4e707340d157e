package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
)

// Mode is a sink's way of writing, and so its guarantee.
type Mode uint8

const (
	// ExactlyOnce writes each checkpoint's rows of a subtask in one
	// transaction, prepared (PREPARE TRANSACTION) at the checkpoint and
	// committed (COMMIT PREPARED) when the checkpoint completes (the
	// default). It needs checkpointing, a TransactionPrefix and a server
	// with max_prepared_transactions above 0.
	ExactlyOnce Mode = iota
	// Upsert writes rows as soon as a batch is full and at every
	// checkpoint, with INSERT … ON CONFLICT (Key) DO UPDATE: at least
	// once, but idempotent by key, so the table ends up as if each row
	// were written once (the last row of a key wins). It needs a unique
	// index or primary key on exactly the Key columns.
	Upsert
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case Upsert:
		return "upsert"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ErrTransactionLost is returned (wrapped, with the transaction) when a
// prepared transaction of a completed checkpoint cannot be committed
// because the server rolled it back: someone ran ROLLBACK PREPARED on it.
// Its rows are lost.
var ErrTransactionLost = errors.New("postgres: prepared transaction lost")

// Registered, so that errors.Is matches it on a job's error in cluster
// mode too (weir.RegisterError).
func init() {
	if err := weir.RegisterError("postgres.transaction-lost", ErrTransactionLost); err != nil {
		panic(err)
	}
}

// SinkConfig configures Sink. Zero values mean the documented defaults.
type SinkConfig[T any] struct {
	// ConnString is a libpq connection string or URL (required), as
	// "postgres://user:password@host:5432/db?sslmode=verify-full". The
	// PG* environment variables fill in what it leaves out, as for psql.
	ConnString string
	// Table is the table written, "name" or "schema.name" (required).
	// Names are taken as they are stored, not folded to lower case: a
	// table created as Events (unquoted) is events.
	Table string
	// Columns are the columns written (required), in the order Row fills
	// them.
	Columns []string
	// Row fills row, of len(Columns), with v's column values, in any
	// type pgx encodes for the column's type (required). row is reused
	// for the next value: do not keep it.
	Row func(v T, row []any) error
	// Mode is ExactlyOnce (the default) or Upsert.
	Mode Mode
	// Key are the columns of the unique index or primary key an upsert
	// conflicts on (Upsert only, required there); they must be among
	// Columns. The other columns are updated.
	Key []string
	// TransactionPrefix names the sink's prepared transactions
	// (ExactlyOnce only, required there): prefix-subtask-checkpoint. It
	// must be unique to this sink among all the jobs writing to the
	// PostgreSQL server (transaction names are server-wide): at startup
	// the sink rolls back the prepared transactions of its prefix that
	// failed attempts left. Letters, digits and _ . : - only, at most 100.
	TransactionPrefix string
	// BatchSize is how many rows are buffered before they are sent in one
	// COPY (default 5000). It bounds the sink's memory: BatchSize values
	// per subtask.
	BatchSize int
	// RequestTimeout bounds each round of statements: a batch's COPY, a
	// prepare, a commit with its retries while the server is unreachable
	// (default 1 min). A statement still running then fails the job.
	RequestTimeout time.Duration
	// Logger (default: the job's).
	Logger *zap.Logger
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,100}$`)

// Validate reports the first invalid setting (what it can tell without
// asking the server).
func (c *SinkConfig[T]) Validate() error {
	switch {
	case c.ConnString == "":
		return errors.New("postgres: sink: no connection string")
	case c.Table == "":
		return errors.New("postgres: sink: no table")
	case len(c.Columns) == 0:
		return fmt.Errorf("postgres: sink %s: no columns", c.Table)
	case c.Row == nil:
		return fmt.Errorf("postgres: sink %s: no Row function", c.Table)
	case c.Mode > Upsert:
		return fmt.Errorf("postgres: sink %s: unknown mode %d", c.Table, c.Mode)
	case c.BatchSize < 0:
		return fmt.Errorf("postgres: sink %s: negative batch size", c.Table)
	case c.RequestTimeout < 0:
		return fmt.Errorf("postgres: sink %s: negative request timeout", c.Table)
	}
	if _, err := parseTable(c.Table); err != nil {
		return err
	}
	for i, col := range c.Columns {
		if col == "" {
			return fmt.Errorf("postgres: sink %s: column %d has no name", c.Table, i)
		}
		if slices.Index(c.Columns, col) != i {
			return fmt.Errorf("postgres: sink %s: column %s twice", c.Table, col)
		}
	}
	switch c.Mode {
	case ExactlyOnce:
		if !prefixRE.MatchString(c.TransactionPrefix) {
			if c.TransactionPrefix == "" {
				return fmt.Errorf("postgres: sink %s: exactly-once needs a TransactionPrefix, unique to this sink", c.Table)
			}
			return fmt.Errorf("postgres: sink %s: transaction prefix %q: letters, digits and _ . : - only, at most 100", c.Table, c.TransactionPrefix)
		}
		if len(c.Key) > 0 {
			return fmt.Errorf("postgres: sink %s: Key is for the upsert mode", c.Table)
		}
	case Upsert:
		if len(c.Key) == 0 {
			return fmt.Errorf("postgres: sink %s: upsert needs the Key columns it conflicts on", c.Table)
		}
		for _, k := range c.Key {
			if !slices.Contains(c.Columns, k) {
				return fmt.Errorf("postgres: sink %s: key column %s is not among the columns written", c.Table, k)
			}
		}
	}
	return nil
}

// parseTable splits "schema.name" (or "name").
func parseTable(s string) (pgx.Identifier, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 || slices.Contains(parts, "") {
		return nil, fmt.Errorf("postgres: sink: table %q: want name or schema.name", s)
	}
	return pgx.Identifier(parts), nil
}

// Sink writes s into a PostgreSQL table (see the package doc). Bad
// configuration is reported by Execute, and so is, before any record is
// read, a server that cannot be reached, a table that does not exist or
// whose columns do not match, and (ExactlyOnce) a server without prepared
// transactions.
func Sink[T any](s *weir.Stream[T], cfg SinkConfig[T]) *weir.Sink {
	env := s.Environment()
	if cfg.Logger == nil {
		cfg.Logger = env.Logger()
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 5000
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = time.Minute
	}
	err := cfg.Validate()
	if _, on := env.Checkpointing(); err == nil && cfg.Mode == ExactlyOnce && !on {
		err = fmt.Errorf("postgres: sink %s: exactly-once needs checkpointing (weir.WithCheckpointing), or use the upsert mode", cfg.Table)
	}
	env.ReportError(err)
	var pc *pgx.ConnConfig
	if err == nil {
		if pc, err = pgx.ParseConfig(cfg.ConnString); err != nil {
			env.ReportError(fmt.Errorf("postgres: sink %s: connection string: %w", cfg.Table, err))
		}
	}
	name := "postgres sink " + cfg.Table
	if err == nil {
		env.CheckBeforeRun(func(ctx context.Context) error { return check(ctx, pc, &cfg) })
	}
	return weir.TwoPhaseCommitSink(s, txnCodec{}, func(sub, par int) (weir.TwoPhaseCommitter[T, *txn], error) {
		return newCommitter(&cfg, pc, sub, par), nil
	}).Name(name)
}

// newCommitter returns the committer of subtask sub of par. Its
// connections name themselves (application_name, unless the connection
// string sets one): "weir postgres sink TABLE SUBTASK".
func newCommitter[T any](cfg *SinkConfig[T], pc *pgx.ConnConfig, sub, par int) *committer[T] {
	table, _ := parseTable(cfg.Table)
	pc = pc.Copy()
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = fmt.Sprintf("weir postgres sink %s %d", cfg.Table, sub)
	}
	c := &committer[T]{cfg: cfg, conf: pc, table: table, sub: sub, par: par,
		log: cfg.Logger.With(zap.String("sink", "postgres sink "+cfg.Table), zap.Int("subtask", sub))}
	c.buf = make([]T, 0, cfg.BatchSize)
	c.src.c = c
	c.src.row = make([]any, len(cfg.Columns))
	return c
}

// check asks the server what only it can tell: that it can be reached,
// that the table exists with the columns written, that the sink may
// write it, and that its mode can work there.
func check[T any](ctx context.Context, pc *pgx.ConnConfig, cfg *SinkConfig[T]) error {
	what := "postgres: sink " + cfg.Table
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("%s: connecting: %w", what, err)
	}
	defer conn.Close(context.Background())
	ident, _ := parseTable(cfg.Table)
	var oid uint32
	var kind string
	if err := conn.QueryRow(ctx, `SELECT c.oid, c.relkind::text FROM pg_class c WHERE c.oid = to_regclass($1)`, ident.Sanitize()).Scan(&oid, &kind); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s: no table %s in database %s", what, ident.Sanitize(), pc.Database)
		}
		return fmt.Errorf("%s: looking up the table: %w", what, err)
	}
	if !strings.Contains("rpf", kind) {
		return fmt.Errorf("%s: %s is not a table (relkind %s)", what, ident.Sanitize(), kind)
	}
	type column struct {
		name                     string
		typ                      string
		notNull, hasDefault, gen bool
	}
	rows, err := conn.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod), attnotnull,
		atthasdef OR attidentity <> '', attgenerated <> ''
		FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, oid)
	if err != nil {
		return fmt.Errorf("%s: reading the columns: %w", what, err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.typ, &c.notNull, &c.hasDefault, &c.gen)
		return c, err
	})
	if err != nil {
		return fmt.Errorf("%s: reading the columns: %w", what, err)
	}
	var missing, names []string
	for _, col := range cfg.Columns {
		i := slices.IndexFunc(cols, func(c column) bool { return c.name == col })
		switch {
		case i < 0:
			missing = append(missing, col)
		case cols[i].gen:
			return fmt.Errorf("%s: column %s is generated: it cannot be written", what, col)
		}
	}
	for _, c := range cols {
		names = append(names, c.name+" "+c.typ)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: the table has no column %s (its columns: %s)", what, strings.Join(missing, ", "), strings.Join(names, ", "))
	}
	for _, c := range cols {
		if c.notNull && !c.hasDefault && !c.gen && !slices.Contains(cfg.Columns, c.name) {
			return fmt.Errorf("%s: column %s is NOT NULL without a default, and not among the columns written: every row would fail", what, c.name)
		}
	}
	privs := "INSERT"
	if cfg.Mode == Upsert {
		privs = "INSERT and UPDATE"
	}
	var may bool
	if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1::oid, 'INSERT') AND (NOT $2::bool OR has_table_privilege($1::oid, 'UPDATE'))`,
		oid, cfg.Mode == Upsert).Scan(&may); err != nil {
		return fmt.Errorf("%s: checking privileges: %w", what, err)
	}
	if !may {
		return fmt.Errorf("%s: user %s may not %s the table", what, pc.User, privs)
	}
	switch cfg.Mode {
	case ExactlyOnce:
		var n string
		if err := conn.QueryRow(ctx, `SHOW max_prepared_transactions`).Scan(&n); err != nil {
			return fmt.Errorf("%s: reading max_prepared_transactions: %w", what, err)
		}
		if v, _ := strconv.Atoi(n); v <= 0 {
			return fmt.Errorf("%s: exactly-once needs prepared transactions, but the server's max_prepared_transactions is %s: "+
				"set it to at least twice the sink's parallelism (postgresql.conf, then restart the server), or use the upsert mode", what, n)
		}
	case Upsert:
		key := slices.Sorted(slices.Values(cfg.Key))
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = $1 AND i.indisunique
			AND i.indpred IS NULL AND i.indexprs IS NULL
			AND (SELECT array_agg(a.attname::text ORDER BY a.attname::text) FROM pg_attribute a
				WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) = $2::text[])`, oid, key).Scan(&ok); err != nil {
			return fmt.Errorf("%s: looking for the key's unique index: %w", what, err)
		}
		if !ok {
			return fmt.Errorf("%s: no unique index or primary key on exactly (%s): an upsert needs one to conflict on", what, strings.Join(cfg.Key, ", "))
		}
	}
	return nil
}

// txn is a sink transaction as checkpointed: the prepared transaction's
// name (ID) and flags (weir.TxnHandle), and its transaction id, set by
// the pre-commit. Upsert's are empty.
type txn struct {
	weir.TxnHandle
	XID uint64
}

func (t *txn) String() string { return t.ID }

// txnCodec encodes a *txn as a weir.TxnHandle with the xid (8 bytes) as
// its extra field.
type txnCodec struct{}

func (txnCodec) Append(dst []byte, t *txn) []byte {
	return weir.AppendTxnHandle(dst, t.TxnHandle, binary.BigEndian.AppendUint64(nil, t.XID))
}

func (txnCodec) Decode(src []byte) (*txn, error) {
	h, extra, err := weir.DecodeTxnHandle(src, 8)
	if err != nil {
		return nil, fmt.Errorf("postgres: sink transaction: %w", err)
	}
	return &txn{TxnHandle: h, XID: binary.BigEndian.Uint64(extra)}, nil
}

// retriable tells, of an error on a connection still open, whether the
// server said it is going away (class 08: connection exception; 57P01-03:
// shutting down or starting up): worth a new connection and another try
// of a statement that loses nothing when repeated.
func retriable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	return false
}

// connectRetriable tells a server that cannot be reached now (worth
// trying again) from one that refuses the connection for good (a wrong
// password, a database that does not exist) or the caller giving up.
func connectRetriable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return retriable(err)
	}
	return true
}

// describeIf is describeErr for an error that may be the server's.
func describeIf(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return describeErr(pe)
	}
	return err
}
