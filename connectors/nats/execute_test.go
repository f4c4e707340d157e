package nats_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	weirnats "github.com/weirstream/weir/connectors/nats"
)

// Bad settings, and what only the server can tell (it cannot be reached,
// the stream does not exist, lacks the subjects, has too short a
// duplicate window), fail Execute naming the connector before any record
// is read.
func TestExecuteErrors(t *testing.T) {
	s := server(t)
	createStream(t, s.URL(), "in", "in.*")
	createStream(t, s.URL(), "out", "out")
	createStreamWith(t, s.URL(), jetstream.StreamConfig{Name: "short", Subjects: []string{"short"}, Duplicates: 2 * time.Second})
	publish(t, s.URL(), func(int) string { return "in.a" }, []string{"x", "y"}, nil)
	des := weirnats.Values(str)
	ck := weir.WithCheckpointing(weir.CheckpointConfig{Interval: 5 * time.Second})
	src := func(mod func(*weirnats.SourceConfig[string])) weirnats.SourceConfig[string] {
		c := weirnats.SourceConfig[string]{URL: s.URL(), Stream: "in", Consumer: "c", Deserializer: des}
		mod(&c)
		return c
	}
	sink := func(mod func(*weirnats.SinkConfig[string])) *weirnats.SinkConfig[string] {
		c := weirnats.SinkConfig[string]{URL: s.URL(), Subject: "out", Value: bytesOf}
		mod(&c)
		return &c
	}
	tests := []struct {
		name string
		src  weirnats.SourceConfig[string]
		sink *weirnats.SinkConfig[string]
		want string
	}{
		{name: "no URL", src: src(func(c *weirnats.SourceConfig[string]) { c.URL = "" }), want: "nats: source: no URL"},
		{name: "no stream", src: src(func(c *weirnats.SourceConfig[string]) { c.Stream = "" }), want: "nats: source: no stream"},
		{name: "no consumer", src: src(func(c *weirnats.SourceConfig[string]) { c.Consumer = "" }), want: "nats: source in: no Consumer name"},
		{name: "bad consumer", src: src(func(c *weirnats.SourceConfig[string]) { c.Consumer = "a.b" }), want: `consumer name "a.b"`},
		{name: "no deserializer", src: src(func(c *weirnats.SourceConfig[string]) { c.Deserializer = nil }), want: "nats: source in: no deserializer"},
		{name: "bad filter", src: src(func(c *weirnats.SourceConfig[string]) { c.Subjects = []string{"in..x"} }), want: `subject filter "in..x" is not a valid subject`},
		{name: "overlapping filters", src: src(func(c *weirnats.SourceConfig[string]) { c.Subjects = []string{"in.a", "in.*"} }), want: `subject filters "in.a" and "in.*" overlap`},
		{name: "unreachable", src: src(func(c *weirnats.SourceConfig[string]) { c.URL = "nats://127.0.0.1:1"; c.RequestTimeout = time.Second }), want: "nats: source in: connecting to nats://127.0.0.1:1"},
		{name: "bad URL", src: src(func(c *weirnats.SourceConfig[string]) { c.URL = "http://[::1" }), want: "nats: source in: connecting to http://[::1"},
		{name: "missing stream", src: src(func(c *weirnats.SourceConfig[string]) { c.Stream = "nope" }), want: `nats: source: stream "nope" does not exist at nats://127.0.0.1:`},
		{name: "missing subject", src: src(func(c *weirnats.SourceConfig[string]) { c.Subjects = []string{"in.a", "other"} }), want: `nats: source in: subject filter "other" matches none of the stream's subjects [in.*]`},
		{name: "sink no subject", sink: sink(func(c *weirnats.SinkConfig[string]) { c.Subject = "" }), want: "nats: sink: set exactly one of Subject and SubjectSelector"},
		{name: "sink wildcard", sink: sink(func(c *weirnats.SinkConfig[string]) { c.Subject = "out.*" }), want: `subject "out.*" is not a valid subject to publish to`},
		{name: "sink no value", sink: sink(func(c *weirnats.SinkConfig[string]) { c.Value = nil }), want: "nats: sink: no value serializer"},
		{name: "sink no prefix", sink: sink(func(c *weirnats.SinkConfig[string]) { c.Guarantee = weirnats.ExactlyOnce }), want: "exactly-once needs a MsgIDPrefix"},
		{name: "sink no stream", sink: sink(func(c *weirnats.SinkConfig[string]) { c.Subject = "elsewhere" }), want: `nats: sink elsewhere: no stream at nats://127.0.0.1:`},
		{name: "sink named stream missing", sink: sink(func(c *weirnats.SinkConfig[string]) { c.Stream = "nope" }), want: `nats: sink outnope: stream "nope" does not exist`},
		{name: "sink subject not in stream", sink: sink(func(c *weirnats.SinkConfig[string]) { c.Stream = "in" }), want: `stream in does not capture subject "out"`},
		{name: "sink unreachable", sink: sink(func(c *weirnats.SinkConfig[string]) { c.URL = "nats://127.0.0.1:1"; c.RequestTimeout = time.Second }), want: "nats: sink out: connecting to nats://127.0.0.1:1"},
		{name: "sink short window", sink: sink(func(c *weirnats.SinkConfig[string]) {
			c.Subject, c.Guarantee, c.MsgIDPrefix = "short", weirnats.ExactlyOnce, "p"
		}), want: "nats: sink short: the duplicate window 2s of stream short must exceed the checkpoint interval 5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := weir.NewEnvironment(ck)
			var read atomic.Int64
			if tt.sink == nil {
				weir.Discard(weir.Map(weirnats.Source(env, tt.src), func(s string) string { read.Add(1); return s }))
			} else {
				in := weirnats.Source(env, src(func(*weirnats.SourceConfig[string]) {}))
				weirnats.Sink(weir.Map(in, func(s string) string { read.Add(1); return s }), *tt.sink)
			}
			_, err := env.Execute(testCtx(t))
			require.ErrorContains(t, err, tt.want)
			require.Zero(t, read.Load(), "records were read")
		})
	}
}

// Exactly-once without checkpointing is refused.
func TestExactlyOnceNeedsCheckpointing(t *testing.T) {
	env := weir.NewEnvironment()
	weirnats.Sink(weir.FromSlice(env, []string{"a"}), weirnats.SinkConfig[string]{URL: "nats://127.0.0.1:1", Subject: "out",
		Value: bytesOf, Guarantee: weirnats.ExactlyOnce, MsgIDPrefix: "p"})
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "nats: sink: exactly-once needs checkpointing")
}
