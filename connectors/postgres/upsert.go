package postgres

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// tmpTable is the temporary table an upsert copies a batch into: one per
// connection, emptied by every commit.
var tmpTable = pgx.Identifier{"weir_upsert"}

// flushUpsert copies the buffer into the temporary table and upserts it
// from there, in one transaction: the last row of a key in the batch
// wins (COPY numbers the rows as they come).
func (c *committer[T]) flushUpsert(ctx context.Context) error {
	// The batch stays buffered until it is in: after a failure of the
	// connection it is sent again on a new one (upserting twice is
	// harmless).
	return c.retry(ctx, &c.conn, func(conn *pgx.Conn) error {
		if c.tmpConn != conn {
			if err := c.createTmp(ctx, conn); err != nil {
				return err
			}
			c.tmpConn = conn
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return c.errorf("upsert: begin: %w", err)
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after the commit
		if err := c.copy(ctx, tmpTable); err != nil {
			return c.errorf("upsert: %w", err)
		}
		if _, err := tx.Exec(ctx, c.upsertStmt()); err != nil {
			return c.errorf("upsert: %w", describeIf(err))
		}
		if err := tx.Commit(ctx); err != nil {
			return c.errorf("upsert: commit: %w", err)
		}
		return nil
	})
}

func (c *committer[T]) createTmp(ctx context.Context, conn *pgx.Conn) error {
	cols := quoteAll(c.cfg.Columns)
	stmt := "CREATE TEMPORARY TABLE " + tmpTable.Sanitize() + " ON COMMIT DELETE ROWS AS SELECT " + cols +
		" FROM " + c.table.Sanitize() + " WITH NO DATA"
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return c.errorf("upsert: creating the temporary table: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE "+tmpTable.Sanitize()+" ADD COLUMN weir_seq bigint GENERATED ALWAYS AS IDENTITY"); err != nil {
		return c.errorf("upsert: creating the temporary table: %w", err)
	}
	return nil
}

// upsertStmt is INSERT INTO table (cols) SELECT DISTINCT ON (key) cols
// FROM tmp ORDER BY key, weir_seq DESC ON CONFLICT (key) DO UPDATE SET
// col = EXCLUDED.col, … (DO NOTHING if every column is the key).
func (c *committer[T]) upsertStmt() string {
	if c.upsert != "" {
		return c.upsert
	}
	cols, key := quoteAll(c.cfg.Columns), quoteAll(c.cfg.Key)
	var b strings.Builder
	b.WriteString("INSERT INTO " + c.table.Sanitize() + " (" + cols + ") SELECT DISTINCT ON (" + key + ") " + cols +
		" FROM " + tmpTable.Sanitize() + " ORDER BY " + key + ", weir_seq DESC ON CONFLICT (" + key + ") DO ")
	var sets []string
	for _, col := range c.cfg.Columns {
		if !slices.Contains(c.cfg.Key, col) {
			q := pgx.Identifier{col}.Sanitize()
			sets = append(sets, q+" = EXCLUDED."+q)
		}
	}
	if len(sets) == 0 {
		b.WriteString("NOTHING")
	} else {
		b.WriteString("UPDATE SET " + strings.Join(sets, ", "))
	}
	c.upsert = b.String()
	return c.upsert
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}
