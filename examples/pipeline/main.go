// Command pipeline runs the pipeline a Go team runs: events from NATS
// JetStream, a windowed aggregation, results in PostgreSQL and in Parquet
// files, all exactly once, and verifies both outputs.
//
// It starts a NATS server with JetStream inside the process, writes a
// deterministic stream of click events into stream clicks (four subject
// partitions, clicks.0 .. clicks.3, each click's event time in a header),
// counts the clicks of every user per second of event time (tumbling
// windows, watermarks per partition) and writes every count both to a
// PostgreSQL table, through prepared transactions committed with the
// checkpoints, and to Parquet files, committed with the checkpoints too.
// The PostgreSQL server is a throwaway one (initdb into a temporary
// directory, a free port); without PostgreSQL binaries the example says
// how to get them and runs the Parquet half alone. -kill N injects N task
// failures, each after a checkpoint completed. Then it reads the table and
// the committed files and compares each with the same counts computed
// from the input in one pass: it exits non-zero on any difference.
//
//	go run ./examples/pipeline -kill 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	pq "github.com/parquet-go/parquet-go"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	weirnats "github.com/weirstream/weir/connectors/nats"
	"github.com/weirstream/weir/connectors/nats/natstest"
	"github.com/weirstream/weir/connectors/parquet"
	"github.com/weirstream/weir/connectors/postgres"
	"github.com/weirstream/weir/internal/pgtest"
)

type click struct {
	User string
	TS   int64 // unix ms
}

var clickCodec = codec.Struct2(codec.String(), func(c click) string { return c.User },
	codec.Int64(), func(c click) int64 { return c.TS }, func(u string, ts int64) click { return click{u, ts} })

// WindowCount is one result: a user's clicks in the second starting at
// Start. It is a row of the table and of the Parquet files.
type WindowCount struct {
	User  string `parquet:"user,dict"`
	Start int64  `parquet:"start,timestamp(millisecond)"`
	N     int64  `parquet:"n"`
}

var windowCountCodec = codec.Struct3(codec.String(), func(w WindowCount) string { return w.User },
	codec.Int64(), func(w WindowCount) int64 { return w.Start },
	codec.Int64(), func(w WindowCount) int64 { return w.N },
	func(u string, s, n int64) WindowCount { return WindowCount{u, s, n} })

// timeHeader carries a click's event time.
const timeHeader = "Click-Time"

// partitions is the number of subject partitions of the clicks stream.
const partitions = 4

type config struct {
	clicks, users, par, kills int
	seed                      uint64
	dir                       string // Parquet output; "": a temporary directory
	// requirePostgres makes missing PostgreSQL binaries an error instead
	// of running the Parquet half alone.
	requirePostgres bool
}

func main() {
	var c config
	flag.IntVar(&c.clicks, "clicks", 100_000, "click events to write")
	flag.IntVar(&c.users, "users", 50, "distinct users")
	flag.IntVar(&c.par, "p", 2, "parallelism")
	flag.IntVar(&c.kills, "kill", 0, "task failures to inject")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the click stream")
	flag.StringVar(&c.dir, "out", "", "directory of the Parquet files (default: a temporary one, removed at the end)")
	flag.Parse()
	c.requirePostgres = os.Getenv("CI") == "true"
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "weir-pipeline")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if c.dir == "" {
		c.dir = filepath.Join(tmp, "parquet")
	}

	srv, err := natstest.Start(filepath.Join(tmp, "nats"))
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("started a NATS server with JetStream in process at %s\n", srv.URL())

	var pg *pgtest.Server
	switch pg, err = pgtest.Start(ctx); {
	case errors.Is(err, pgtest.ErrNoBinaries) && !c.requirePostgres:
		fmt.Printf("no PostgreSQL binaries: %s to run the PostgreSQL half; running the Parquet half alone\n", pgtest.InstallHint)
		pg = nil
	case err != nil:
		return fmt.Errorf("starting PostgreSQL: %w", err)
	default:
		defer pg.Stop()
		fmt.Printf("started a throwaway PostgreSQL server on port %d\n", pg.Port)
		if err := createTable(ctx, pg.ConnString()); err != nil {
			return err
		}
	}

	clicks := generate(c.clicks, c.users, c.seed)
	start := time.Now()
	if err := write(ctx, srv.URL(), clicks); err != nil {
		return err
	}
	fmt.Printf("wrote %d clicks of %d users to stream clicks (%d subject partitions) in %v\n", c.clicks, c.users, partitions, time.Since(start).Round(time.Millisecond))

	env := weir.NewEnvironment(weir.WithParallelism(c.par), weir.WithBufferTimeout(5*time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 50 * time.Millisecond, TolerableFailures: 100}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(c.kills+10, 20*time.Millisecond)))
	k := newKiller(c.kills, int64(c.clicks/(c.kills+2)))
	src := weirnats.Source(env, weirnats.SourceConfig[click]{
		URL: srv.URL(), Stream: "clicks", Consumer: "pipeline", Bounded: true,
		Subjects:        weirnats.PartitionSubjects("clicks.%d", partitions),
		TimestampHeader: timeHeader,
		Deserializer: func(m jetstream.Msg) (click, error) {
			ts, err := strconv.ParseInt(m.Headers().Get(timeHeader), 10, 64)
			return click{User: string(m.Data()), TS: ts}, err
		},
		Watermarks: weir.BoundedOutOfOrderness[click](500*time.Millisecond, nil).WithIdleness(5 * time.Second),
	}).WithCodec(clickCodec).UID("clicks")
	faulty := weir.Map(src, func(c click) click { k.check(); return c }).WithCodec(clickCodec)
	windows := weir.Window(weir.KeyBy(faulty, func(c click) string { return c.User }, codec.String()), weir.TumblingWindows(time.Second))
	perWindow := weir.WindowAggregate(windows, weir.AggregateFunction[click, int64, int64]{
		Codec: codec.Int64(), New: func() int64 { return 0 }, Add: func(n int64, _ click) int64 { return n + 1 },
		Merge: func(a, b int64) int64 { return a + b }, Result: func(n int64) int64 { return n },
	}, codec.Int64())
	counts := weir.Map(perWindow, func(w weir.Windowed[string, int64]) WindowCount {
		return WindowCount{User: w.Key, Start: w.Window.Start, N: w.Value}
	}).WithCodec(windowCountCodec)
	if pg != nil {
		postgres.Sink(counts, postgres.SinkConfig[WindowCount]{
			ConnString: pg.ConnString(), Table: "window_counts", Columns: []string{"usr", "window_start", "n"},
			Row: func(w WindowCount, row []any) error {
				row[0], row[1], row[2] = w.User, w.Start, w.N
				return nil
			},
			TransactionPrefix: "pipeline", BatchSize: 1000,
		}).UID("postgres")
	}
	parquet.Sink(counts, parquet.Config[WindowCount]{Dir: c.dir}).UID("parquet")

	job, err := env.Start(ctx)
	if err != nil {
		return err
	}
	k.job.Store(job)
	res, err := job.Wait()
	if err != nil {
		return err
	}
	fmt.Printf("job finished in %v: %s (%s), %s\n", res.Duration.Round(time.Millisecond), count(res.Restarts, "restart"),
		count(int64(c.kills)-k.left.Load(), "injected failure"), count(res.Checkpoints.Completed, "checkpoint"))

	want := batch(clicks)
	if pg != nil {
		got, err := readTable(ctx, pg.ConnString())
		if err != nil {
			return err
		}
		fmt.Printf("read %d window counts from PostgreSQL table window_counts; the batch answer has %d\n", len(got), len(want))
		if err := compare("PostgreSQL", want, got); err != nil {
			return err
		}
	}
	got, files, err := readParquet(c.dir)
	if err != nil {
		return err
	}
	fmt.Printf("read %d window counts from %s in %s; the batch answer has %d\n", len(got), count(files, "Parquet file"), c.dir, len(want))
	if err := compare("Parquet", want, got); err != nil {
		return err
	}
	if pg != nil {
		fmt.Println("verified: the table and the Parquet files each equal the batch answer exactly (nothing lost, nothing duplicated)")
	} else {
		fmt.Println("verified: the Parquet files equal the batch answer exactly (nothing lost, nothing duplicated); PostgreSQL skipped")
	}
	return nil
}

// generate makes n clicks, 2 ms of event time apart, each up to 200 ms
// out of order, over users.
func generate(n, users int, seed uint64) []click {
	r := rand.New(rand.NewPCG(seed, 7))
	base := int64(1_700_000_000_000)
	cs := make([]click, n)
	for i := range cs {
		cs[i] = click{User: fmt.Sprintf("user%02d", r.IntN(users)), TS: base + int64(i)*2 - r.Int64N(200)}
	}
	return cs
}

// partitionOf is a user's subject partition.
func partitionOf(user string) int {
	h := fnv.New32a()
	h.Write([]byte(user))
	return int(h.Sum32() % partitions)
}

// write creates stream clicks and publishes the clicks to it, each to
// its user's partition, its event time in a header.
func write(ctx context.Context, url string, clicks []click) error {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "clicks", Subjects: []string{"clicks.*"}}); err != nil {
		return fmt.Errorf("creating stream clicks: %w", err)
	}
	for i, c := range clicks {
		m := &natsgo.Msg{Subject: "clicks." + strconv.Itoa(partitionOf(c.User)), Data: []byte(c.User),
			Header: natsgo.Header{timeHeader: []string{strconv.FormatInt(c.TS, 10)}}}
		if _, err := js.PublishMsgAsync(m); err != nil {
			return err
		}
		if i%1000 == 999 || i == len(clicks)-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return fmt.Errorf("publishing clicks: %w", ctx.Err())
			}
		}
	}
	return nil
}

func createTable(ctx context.Context, conn string) error {
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	// The primary key makes a window written twice fail the job.
	_, err = c.Exec(ctx, "CREATE TABLE window_counts (usr text NOT NULL, window_start bigint NOT NULL, n bigint NOT NULL, PRIMARY KEY (usr, window_start))")
	return err
}

// batch counts the clicks per user and second in one pass.
func batch(clicks []click) map[string]int64 {
	m := map[string]int64{}
	for _, c := range clicks {
		m[fmt.Sprintf("%s,%d", c.User, c.TS-c.TS%1000)]++
	}
	return m
}

// add records one window count; a window seen twice becomes -1, never
// equal to the batch answer.
func add(got map[string]int64, user string, start, n int64) {
	k := fmt.Sprintf("%s,%d", user, start)
	if _, dup := got[k]; dup {
		got[k] = -1
	} else {
		got[k] = n
	}
}

func readTable(ctx context.Context, conn string) (map[string]int64, error) {
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, "SELECT usr, window_start, n FROM window_counts")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[string]int64{}
	for rows.Next() {
		var u string
		var s, n int64
		if err := rows.Scan(&u, &s, &n); err != nil {
			return nil, err
		}
		add(got, u, s, n)
	}
	return got, rows.Err()
}

// readParquet reads the committed Parquet files under dir (hidden names
// are in-progress or pending parts, as a data-lake reader skips them).
func readParquet(dir string) (map[string]int64, int, error) {
	got := map[string]int64{}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		rows, err := pq.ReadFile[WindowCount](path)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		files++
		for _, r := range rows {
			add(got, r.User, r.Start, r.N)
		}
		return nil
	})
	return got, files, err
}

func compare(what string, want, got map[string]int64) error {
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("window %s missing (want %d)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("window %s: got %d, want %d (-1: written twice)", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("window %s not in the batch answer", k))
		}
	}
	if len(diffs) > 0 {
		if len(diffs) > 10 {
			diffs = append(diffs[:10], fmt.Sprintf("... %d more", len(diffs)-10))
		}
		return fmt.Errorf("the %s output differs from the batch answer:\n  %s", what, strings.Join(diffs, "\n  "))
	}
	return nil
}

// killer fails the job left times: at the first record past every
// every-th, once a checkpoint completed since the last failure. While it
// waits for that checkpoint it slows the job down a while, so that the
// failures asked for happen.
type killer struct {
	job    atomic.Pointer[weir.Job]
	seen   atomic.Int64
	next   atomic.Int64 // record count of the next failure
	left   atomic.Int64
	every  int64
	last   atomic.Int64 // completed checkpoints at the last failure
	waited atomic.Int64 // records slowed down for the next failure
}

func newKiller(kills int, every int64) *killer {
	k := &killer{every: every}
	k.left.Store(int64(kills))
	k.next.Store(every)
	return k
}

func (k *killer) check() {
	c := k.seen.Add(1)
	at := k.next.Load()
	if k.left.Load() <= 0 || c < at {
		return
	}
	j := k.job.Load()
	if j == nil {
		return
	}
	done := int64(j.CheckpointStats().Completed)
	if done <= k.last.Load() {
		// Let a checkpoint complete; none may come once a source
		// subtask finished its input: then give this failure up.
		if k.waited.Add(1) < 1000 {
			time.Sleep(100 * time.Microsecond)
		} else if k.next.CompareAndSwap(at, c+k.every) {
			k.waited.Store(0)
		}
		return
	}
	if k.next.CompareAndSwap(at, c+k.every) {
		k.waited.Store(0)
		k.left.Add(-1)
		k.last.Store(done)
		panic(fmt.Sprintf("injected failure at record %d", c))
	}
}

// count is n and word, in the plural unless n is 1 ("1 restart", "2
// restarts").
func count[N int | int64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
