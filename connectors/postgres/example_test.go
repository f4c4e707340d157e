package postgres_test

import (
	"context"
	"log"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/postgres"
)

// Running counts per user, written to PostgreSQL exactly once: each
// checkpoint's rows commit together when the checkpoint completes.
// (Compiled, not run: it needs a server.)
func ExampleSink() {
	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: 5 * time.Second}))
	clicks := weir.FromSlice(env, []string{"ann", "bob", "ann"})
	counts := weir.Reduce(weir.KeyBy(weir.Map(clicks, func(u string) count { return count{u, 1} }).WithCodec(countCodec),
		func(c count) string { return c.User }, codec.String()),
		func(a, b count) count { a.N += b.N; return a })
	postgres.Sink(counts, postgres.SinkConfig[count]{
		ConnString:        "postgres://weir@localhost:5432/app",
		Table:             "user_counts", // CREATE TABLE user_counts (usr text, n bigint)
		Columns:           []string{"usr", "n"},
		Row:               func(c count, row []any) error { row[0], row[1] = c.User, c.N; return nil },
		TransactionPrefix: "user-counts", // unique to this sink on the server
	}).UID("counts-sink")
	if _, err := env.Execute(context.Background()); err != nil {
		log.Fatal(err)
	}
}
