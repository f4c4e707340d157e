package parquet_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	pq "github.com/parquet-go/parquet-go"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/parquet"
)

// Click is a row of the Parquet files: the struct is the schema.
type Click struct {
	User string `parquet:"user,dict"`
	URL  string `parquet:"url"`
	At   int64  `parquet:"at,timestamp(millisecond)"`
}

// Clicks written as Parquet files, one directory per event-time hour,
// exactly once; the committed files read back with parquet-go.
func Example() {
	dir, _ := os.MkdirTemp("", "clicks")
	defer os.RemoveAll(dir)
	start := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC).UnixMilli()

	env := weir.NewEnvironment(weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Second}))
	clicks := weir.AssignTimestamps(weir.FromGenerator(env, 7200, func(i int64) Click {
		return Click{User: fmt.Sprint("u", i%10), URL: fmt.Sprint("/p/", i%100), At: start + i*1000}
	}).WithCodec(codecOfClick),
		weir.MonotonousTimestamps(func(c Click) int64 { return c.At }))
	parquet.Sink(clicks, parquet.Config[Click]{
		Dir:           dir,      // <dir>/2026-05-01--09/part-<uid>-<subtask>-<n>.parquet
		RollSize:      64 << 20, // and at every checkpoint
		WriterOptions: []pq.WriterOption{pq.Compression(&pq.Zstd)},
	})
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	rows := map[string]int{}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
			cs, err := pq.ReadFile[Click](path)
			if err != nil {
				return err
			}
			rows[filepath.Base(filepath.Dir(path))] += len(cs)
		}
		return err
	})
	fmt.Println(rows)
	// Output:
	// map[2026-05-01--09:3600 2026-05-01--10:3600]
}

var codecOfClick = codec.Struct3(codec.String(), func(c Click) string { return c.User },
	codec.String(), func(c Click) string { return c.URL },
	codec.Int64(), func(c Click) int64 { return c.At },
	func(u, url string, at int64) Click { return Click{User: u, URL: url, At: at} })
