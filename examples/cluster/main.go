// Command cluster runs a word count across three OS processes on
// loopback: this process is the coordinator, and it starts two copies of
// itself as workers. The workers exchange buffers over weir's TCP data
// plane; the coordinator schedules tasks, triggers checkpoints and
// restarts the job after failures. The counts go to an exactly-once file
// sink, which the coordinator reads back and checks.
//
// With -ha the job is highly available: this process starts an etcd
// server in itself, two coordinator processes that campaign for the
// job's leadership, and two workers that follow the leader; with
// -kill-coordinator N it SIGKILLs the leading coordinator N times (each
// time once it completed a checkpoint), starts a replacement, and reports
// how long the next leader took to complete its first checkpoint.
//
//	go run ./examples/cluster               # 2 workers, 200 000 lines
//	go run ./examples/cluster -kill         # SIGKILL a worker mid-job; a new one joins
//	go run ./examples/cluster -lines 1000000 -p 4
//	go run ./examples/cluster -ha -kill-coordinator 2
//	go run ./examples/cluster -storage s3 -kill   # checkpoints on an S3 server in this process
//	go run ./examples/cluster -storage s3 -ha -kill-coordinator 2
//
// With -storage s3 this process serves the S3 API (gofakes3 over loopback
// HTTP) and every process keeps the job's checkpoints there,
// s3://weir/wordcount, reaching it through the standard AWS_* environment
// as it would reach S3 or MinIO.
//
// -role coordinator and -role worker run one process of a deployment
// (see examples/cluster/k8s): with -etcd, coordinators elect a leader
// and workers find it there.
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
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

// params are the job's parameters: every process must get the same ones,
// or the workers build a different job and the coordinator refuses them.
type params struct {
	lines int64
	par   int
	rate  int // lines per second, 0: unlimited
	out   string
	chk   string
	token string
	// etcd and job: the etcd endpoints (comma-separated) and the job's
	// ID there, for a highly available job ("": none).
	etcd     string
	job      string
	election time.Duration

	// objects: this process serves the job's checkpoints from an S3
	// server in itself (-storage s3; the processes it starts get -chk
	// s3://… and the environment); storage is its coordinator's open
	// checkpoint storage there. Neither is passed on.
	objects bool
	storage state.Storage
}

func (p params) args() []string {
	a := []string{"-lines", strconv.FormatInt(p.lines, 10), "-p", strconv.Itoa(p.par),
		"-rate", strconv.Itoa(p.rate), "-out", p.out, "-chk", p.chk, "-token", p.token}
	if p.etcd != "" {
		a = append(a, "-etcd", p.etcd, "-job-id", p.job, "-election-timeout", p.election.String())
	}
	return a
}

// haConfig is the job's high availability, or nil.
func (p params) haConfig(id, advertise string) *weir.HAConfig {
	if p.etcd == "" {
		return nil
	}
	return &weir.HAConfig{Endpoints: strings.Split(p.etcd, ","), JobID: p.job, ID: id, Advertise: advertise, ElectionTimeout: p.election}
}

// options are the flags of one process beyond the job's parameters.
type options struct {
	role, id, coordinator       string
	kill                        bool
	ha                          bool
	killCoordinator, top        int
	listen, advertise           string
	dataListen, dataAdvertise   string
	workers                     int
	dashboard, prometheus, logs string
	storage                     string
}

// flags defines the example's flags on fs (the Kubernetes manifests'
// test checks theirs against it).
func flags(fs *flag.FlagSet, p *params, o *options) {
	fs.Int64Var(&p.lines, "lines", 200_000, "lines of text to count")
	fs.IntVar(&p.par, "p", 2, "parallelism")
	fs.IntVar(&p.rate, "rate", 0, "source rate limit in lines/s (0: unlimited; -kill and -kill-coordinator set one)")
	fs.StringVar(&p.out, "out", "", "output directory (default: a temporary one)")
	fs.StringVar(&p.chk, "chk", "", "checkpoint directory shared by all processes (default: a temporary one)")
	fs.StringVar(&p.token, "token", envOr("WEIR_TOKEN", ""), "shared secret of the control and data planes (default: $WEIR_TOKEN, else random)")
	fs.StringVar(&p.etcd, "etcd", envOr("WEIR_ETCD", ""), "etcd endpoints, comma-separated: the job is highly available (default: $WEIR_ETCD)")
	fs.StringVar(&p.job, "job-id", "wordcount", "the job's ID in etcd")
	fs.DurationVar(&p.election, "election-timeout", 2*time.Second, "the leader's etcd lease (whole seconds)")
	fs.StringVar(&o.role, "role", "", "run one process of a deployment: coordinator or worker (default: the whole job on this machine)")
	fs.StringVar(&o.id, "id", envOr("POD_NAME", ""), "this process's ID (default: $POD_NAME, else one of its own)")
	fs.StringVar(&o.id, "worker", "", "run as the worker with this ID (the coordinator starts them)")
	fs.StringVar(&o.coordinator, "coordinator", "", "the coordinator's address (workers without -etcd)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "the coordinator's control listen address (-role coordinator)")
	fs.StringVar(&o.advertise, "advertise", "", "the coordinator's control address as workers dial it (default: the listener's)")
	fs.StringVar(&o.dataListen, "data-listen", "127.0.0.1:0", "a worker's data-plane listen address")
	fs.StringVar(&o.dataAdvertise, "data-advertise", "", "a worker's data-plane address as other workers dial it (default: the listener's)")
	fs.IntVar(&o.workers, "workers", 2, "workers a coordinator waits for before it deploys")
	fs.StringVar(&o.dashboard, "dashboard", "", "the coordinator's dashboard listen address (\"\": none)")
	fs.StringVar(&o.prometheus, "prometheus", "", "the coordinator's Prometheus /metrics listen address (\"\": none)")
	fs.StringVar(&o.logs, "log-level", "warn", "log level: debug, info, warn or error")
	fs.BoolVar(&o.kill, "kill", false, "kill a worker with SIGKILL once a checkpoint completed, then start a new one")
	fs.BoolVar(&o.ha, "ha", false, "run the job highly available: an etcd server in this process, two coordinator processes, two workers")
	fs.IntVar(&o.killCoordinator, "kill-coordinator", 0, "with -ha: SIGKILL the leading coordinator this many times during the job")
	fs.IntVar(&o.top, "top", 10, "how many words to print")
	fs.StringVar(&o.storage, "storage", "file", "where the job's checkpoints go when this process runs the whole job: file (-chk, a directory), or s3 (an S3 server in this process)")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	var p params
	var o options
	flags(flag.CommandLine, &p, &o)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	p.objects, err = storageFlag(o.storage)
	switch {
	case err != nil:
	case p.objects && (o.role != "" || o.id != ""):
		err = errors.New("-storage s3 runs an S3 server in the process that runs the whole job; a deployment's processes take -chk s3://bucket/prefix and the AWS_* environment")
	case o.role == "worker" || o.role == "" && o.id != "" && !o.ha:
		err = runWorker(ctx, p, o)
	case o.role == "coordinator":
		err = runCoordinatorProcess(ctx, p, o)
	case o.role != "":
		err = fmt.Errorf("-role %q: want coordinator or worker", o.role)
	case o.ha:
		err = runHA(ctx, p, o.killCoordinator, o.top)
	default:
		err = runCoordinator(ctx, p, o.kill, o.top)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func textLines() []string {
	var lines []string
	for _, l := range strings.Split(embedded, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func splitWords(line string) []string {
	var ws []string
	for _, w := range strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
		return !unicode.IsLetter(r) && r != '\''
	}) {
		if w = strings.Trim(w, "'"); w != "" {
			ws = append(ws, w)
		}
	}
	return ws
}

// build defines the job; every process calls it with the same params.
func build(p params, opts ...weir.Option) *weir.Environment {
	opts = append(opts, weir.WithParallelism(p.par),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 200 * time.Millisecond, Dir: p.chk, Storage: p.storage}))
	env := weir.NewEnvironment(opts...)
	text := textLines()
	src := weir.FromGenerator(env, p.lines, func(i int64) string { return text[i%int64(len(text))] }).Name("lines").UID("lines")
	if p.rate > 0 {
		src = weir.Map(src, pace(p.rate/p.par)).Name("pace")
	}
	words := weir.FlatMap(src, func(line string, emit func(WordCount)) {
		for _, w := range splitWords(line) {
			emit(WordCount{Word: w, Count: 1})
		}
	}).Name("split").WithCodec(wcCodec)
	counts := weir.Reduce(weir.KeyBy(words, func(w WordCount) string { return w.Word }, codec.String()),
		func(acc, v WordCount) WordCount { return WordCount{acc.Word, acc.Count + v.Count} }).Name("count").UID("count")
	weir.FileSink(counts, p.out, func(w WordCount) []byte { return fmt.Appendf(nil, "%s %d", w.Word, w.Count) }).UID("counts")
	return env
}

// pace returns an identity function that holds one subtask to rate
// lines per second.
func pace(rate int) func(string) string {
	var start time.Time
	var n int
	return func(s string) string {
		if start.IsZero() {
			start = time.Now()
		}
		if n++; n%256 == 0 {
			if d := time.Duration(n)*time.Second/time.Duration(rate) - time.Since(start); d > 0 {
				time.Sleep(d)
			}
		}
		return s
	}
}

func runWorker(ctx context.Context, p params, o options) error {
	log, err := logger(o.logs)
	if err != nil {
		return err
	}
	defer log.Sync()
	env := build(p, weir.WithLogger(log.Named(o.id)))
	return env.RunWorker(ctx, weir.WorkerConfig{Coordinator: o.coordinator, ID: o.id, Token: p.token,
		DataListen: o.dataListen, DataAdvertise: o.dataAdvertise, HA: p.haConfig("", "")})
}

func logger(level string) (*zap.Logger, error) {
	lc := zap.NewProductionConfig()
	l, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	lc.Level = l
	lc.Encoding, lc.EncoderConfig = "console", zap.NewDevelopmentEncoderConfig()
	return lc.Build()
}

// runCoordinatorProcess runs one coordinator of a deployment. With
// -etcd it stands for election, leads the job once elected, and stands
// again when its term ends before the job (weir.ErrLeadershipLost).
func runCoordinatorProcess(ctx context.Context, p params, o options) error {
	if p.chk == "" || p.out == "" {
		return errors.New("-role coordinator needs -chk and -out (directories every process shares)")
	}
	if p.token == "" {
		return errors.New("-role coordinator needs -token (or $WEIR_TOKEN)")
	}
	log, err := logger(o.logs)
	if err != nil {
		return err
	}
	defer log.Sync()
	for {
		opts := []weir.Option{weir.WithLogger(log.Named(o.id)), weir.WithCluster(weir.ClusterConfig{
			Listen: o.listen, Workers: o.workers, Token: p.token, WorkerTimeout: 30 * time.Second,
			HA: p.haConfig(o.id, o.advertise)})}
		if o.dashboard != "" {
			opts = append(opts, weir.WithDashboard(o.dashboard))
		}
		if o.prometheus != "" {
			opts = append(opts, weir.WithPrometheus(o.prometheus))
		}
		res, err := build(p, opts...).Execute(ctx)
		if p.etcd != "" && errors.Is(err, weir.ErrLeadershipLost) && ctx.Err() == nil {
			log.Warn("no longer the leader; standing for election again", zap.Error(err))
			continue
		}
		if err == nil && res.Checkpoints != nil {
			fmt.Printf("%s: job finished: %s, %s\n", o.id, count(res.Restarts, "restart"), count(res.Checkpoints.Completed, "checkpoint"))
		}
		return err
	}
}

func runCoordinator(ctx context.Context, p params, kill bool, top int) error {
	tmp, err := os.MkdirTemp("", "weir-cluster-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if p.out == "" {
		p.out = filepath.Join(tmp, "out")
	}
	var objects *objectStore
	if p.objects {
		if objects, err = startObjectStore(&p); err != nil {
			return err
		}
		defer objects.close()
		st, err := objects.open(ctx, "wordcount")
		if err != nil {
			return err
		}
		defer st.Close()
		p.storage = st
	}
	if p.chk == "" {
		p.chk = filepath.Join(tmp, "checkpoints")
	}
	if p.token == "" {
		p.token = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if kill && p.rate == 0 {
		p.rate = int(p.lines) / 3 // about three seconds, time to kill
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := logger("warn")
	if err != nil {
		return err
	}
	defer log.Sync()
	env := build(p, weir.WithLogger(log.Named("coordinator")), weir.WithCluster(weir.ClusterConfig{
		Listener: ln, Workers: 2, Token: p.token, WorkerTimeout: 30 * time.Second}))

	start := time.Now()
	job, err := env.Start(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("coordinator on %s; starting 2 worker processes\n", ln.Addr())
	procs := &workers{self: self, args: append(p.args(), "-coordinator", ln.Addr().String())}
	if objects != nil {
		procs.env = objects.env
	}
	defer procs.stop()
	for _, id := range []string{"worker-1", "worker-2"} {
		if err := procs.start(id); err != nil {
			job.Cancel()
			_, _ = job.Wait()
			return err
		}
	}
	ended := make(chan struct{})
	var killer sync.WaitGroup
	defer killer.Wait()
	defer close(ended)
	if kill {
		killer.Go(func() {
			for job.CheckpointStats().Completed == 0 {
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ended:
					return
				}
			}
			fmt.Println("a checkpoint completed: killing worker-2 with SIGKILL, starting worker-3")
			procs.kill("worker-2")
			if err := procs.start("worker-3"); err != nil {
				fmt.Fprintln(os.Stderr, "cluster:", err)
			}
		})
	}
	res, err := job.Wait()
	if err != nil {
		return err
	}
	if err := procs.wait(10 * time.Second); err != nil {
		return err
	}
	fmt.Printf("job finished in %v: %s, %s\n",
		res.Duration.Round(time.Millisecond), count(res.Restarts, "restart"), count(res.Checkpoints.Completed, "checkpoint"))
	if objects != nil {
		if err := objects.report(); err != nil {
			return err
		}
	}
	return check(p, top, time.Since(start))
}

// check reads the committed output back and compares it with a direct
// count of the input.
func check(p params, top int, took time.Duration) error {
	want := map[string]int64{}
	var words int64
	text := textLines()
	for i, l := range text {
		n := p.lines / int64(len(text))
		if int64(i) < p.lines%int64(len(text)) {
			n++
		}
		for _, w := range splitWords(l) {
			want[w] += n
			words += n
		}
	}
	got := map[string]int64{}
	var updates int64
	entries, err := os.ReadDir(p.out)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			return fmt.Errorf("uncommitted file %s left in the output", e.Name())
		}
		b, err := os.ReadFile(filepath.Join(p.out, e.Name()))
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			w, c, ok := strings.Cut(sc.Text(), " ")
			n, err := strconv.ParseInt(c, 10, 64)
			if !ok || err != nil {
				return fmt.Errorf("bad output line %q", sc.Text())
			}
			got[w] = max(got[w], n)
			updates++
		}
	}
	type kv struct {
		w string
		n int64
	}
	var all []kv
	for w, n := range got {
		all = append(all, kv{w, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].w < all[j].w })
	for i := 0; i < top && i < len(all); i++ {
		fmt.Printf("%8d %s\n", all[i].n, all[i].w)
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d distinct words in the output, want %d", len(got), len(want))
	}
	for w, n := range want {
		if got[w] != n {
			return fmt.Errorf("word %q counted %d times, want %d", w, got[w], n)
		}
	}
	// Exactly once: one committed update per input word.
	if updates != words {
		return fmt.Errorf("%d committed updates for %d words", updates, words)
	}
	fmt.Printf("verified: %d words, %d distinct, counted exactly once across processes (%v)\n",
		words, len(want), took.Round(time.Millisecond))
	return nil
}

// workers are the worker processes this coordinator started.
type workers struct {
	self string
	args []string
	env  []string // added to this process's environment

	mu    sync.Mutex
	procs map[string]*exec.Cmd
	done  map[string]chan error
}

func (ws *workers) start(id string) error {
	return ws.startAs(id, "-worker", id)
}

// startAs starts process id with role arguments before the job's.
func (ws *workers) startAs(id string, role ...string) error {
	cmd := exec.Command(ws.self, append(role, ws.args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = procAttr()
	if ws.env != nil {
		cmd.Env = append(os.Environ(), ws.env...)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", id, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.procs == nil {
		ws.procs, ws.done = map[string]*exec.Cmd{}, map[string]chan error{}
	}
	ws.procs[id], ws.done[id] = cmd, done
	return nil
}

func (ws *workers) kill(id string) {
	ws.mu.Lock()
	cmd, done := ws.procs[id], ws.done[id]
	delete(ws.procs, id)
	delete(ws.done, id)
	ws.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// wait waits for the workers to exit (the coordinator shut them down).
func (ws *workers) wait(timeout time.Duration) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	deadline := time.After(timeout)
	var errs []error
	for id, done := range ws.done {
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("worker %s: %w", id, err))
			}
		case <-deadline:
			errs = append(errs, fmt.Errorf("worker %s did not exit", id))
		}
		delete(ws.procs, id)
		delete(ws.done, id)
	}
	return errors.Join(errs...)
}

// stop kills whatever is still running.
func (ws *workers) stop() {
	ws.mu.Lock()
	ids := make([]string, 0, len(ws.procs))
	for id := range ws.procs {
		ids = append(ids, id)
	}
	ws.mu.Unlock()
	for _, id := range ids {
		ws.kill(id)
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
