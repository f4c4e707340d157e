// Command wordcount counts the words of a text with a parallel keyed
// count, prints the most frequent ones and checks every count against a
// direct count of the text (it exits non-zero if one differs).
//
//	go run ./examples/wordcount              # the embedded text
//	go run ./examples/wordcount -file F -p 4 -top 20
package main

import (
	"bufio"
	"context"
	_ "embed"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"sort"
	"strings"
	"unicode"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

//go:embed text.txt
var embedded string

// WordCount is a word and how often it occurred so far.
type WordCount struct {
	Word  string
	Count int64
}

var wcCodec = codec.Struct2(
	codec.String(), func(w WordCount) string { return w.Word },
	codec.Int64(), func(w WordCount) int64 { return w.Count },
	func(w string, c int64) WordCount { return WordCount{w, c} },
)

func main() {
	file := flag.String("file", "", "text file to count (default: an embedded text)")
	par := flag.Int("p", 2, "parallelism")
	top := flag.Int("top", 10, "how many words to print")
	flag.Parse()
	if err := run(*file, *par, *top); err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		os.Exit(1)
	}
}

func run(file string, par, top int) error {
	lines, err := readLines(file)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	env := weir.NewEnvironment(weir.WithParallelism(par))
	text := weir.FromSlice(env, lines).Name("lines")
	words := weir.FlatMap(text, func(line string, emit func(WordCount)) {
		for _, w := range split(line) {
			emit(WordCount{Word: w, Count: 1})
		}
	}).Name("split").WithCodec(wcCodec)
	counts := weir.Reduce(weir.KeyBy(words, func(w WordCount) string { return w.Word }, codec.String()),
		func(acc, v WordCount) WordCount { return WordCount{acc.Word, acc.Count + v.Count} }).Name("count")
	// Each reduce subtask emits a running count; keep the last per word.
	final, _ := weir.Collect(counts)

	res, err := env.Execute(ctx)
	if err != nil {
		return err
	}
	latest := map[string]int64{}
	for _, wc := range final.Values() {
		if wc.Count > latest[wc.Word] {
			latest[wc.Word] = wc.Count
		}
	}
	// The job's answer against a plain count of the same words.
	want := map[string]int64{}
	for _, line := range lines {
		for _, w := range split(line) {
			want[w]++
		}
	}
	if !maps.Equal(latest, want) {
		return fmt.Errorf("the job counted %d distinct words, a direct count %d, and they differ", len(latest), len(want))
	}
	type kv struct {
		w string
		n int64
	}
	var all []kv
	var total int64
	for w, n := range latest {
		all = append(all, kv{w, n})
		total += n
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].w < all[j].w
	})
	fmt.Printf("%d words, %d distinct, parallelism %d, %v\n", total, len(all), par, res.Duration.Round(1e6))
	for i := 0; i < top && i < len(all); i++ {
		fmt.Printf("%6d  %s\n", all[i].n, all[i].w)
	}
	fmt.Println("verified: every word's count equals a direct count of the text")
	return nil
}

// split returns the words of line: runs of letters and apostrophes,
// lower-cased, without leading or trailing apostrophes (none empty).
func split(line string) []string {
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
		return !unicode.IsLetter(r) && r != '\''
	}) {
		if w = strings.Trim(w, "'"); w != "" {
			words = append(words, w)
		}
	}
	return words
}

func readLines(file string) ([]string, error) {
	if file == "" {
		return strings.Split(embedded, "\n"), nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}
