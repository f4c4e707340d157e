package codec_test

import (
	"fmt"

	"github.com/weirstream/weir/codec"
)

// WordCount is a user type encoded with Struct2.
type WordCount struct {
	Word  string
	Count int64
}

func Example() {
	wc := codec.Struct2(
		codec.String(), func(w WordCount) string { return w.Word },
		codec.Int64(), func(w WordCount) int64 { return w.Count },
		func(word string, count int64) WordCount { return WordCount{word, count} },
	)

	buf := wc.Append(nil, WordCount{"weir", 3})
	fmt.Printf("% x\n", buf)

	got, err := wc.Decode(buf)
	fmt.Println(got, err)

	_, err = wc.Decode(buf[:7])
	fmt.Println(err)
	// Output:
	// 04 77 65 69 72 00 00 00 00 00 00 00 03
	// {weir 3} <nil>
	// codec: struct2: field 2: int64: want 8 bytes, got 2
}

func ExamplePairOf() {
	c := codec.PairOf(codec.Int64(), codec.Slice(codec.String()))
	buf := c.Append(nil, codec.Pair[int64, []string]{First: 1, Second: []string{"a", "bc"}})
	fmt.Printf("% x\n", buf)
	p, err := c.Decode(buf)
	fmt.Println(p.First, p.Second, err)
	// Output:
	// 00 00 00 00 00 00 00 01 02 01 61 02 62 63
	// 1 [a bc] <nil>
}
