package weir_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
)

// chromium finds a Chromium (or Chrome) binary. Without one the browser
// test is skipped, except in CI (CI=true), where .ci/run installs it.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no Chromium to drive the dashboard: install the Debian package chromium (apt-get install -y chromium)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium for the test; it is stopped at the
// end of the test.
func browser(t *testing.T) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // as root in CI
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(testCtx(t), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit
	})
	return ctx
}

// poll waits until the page's JavaScript expression is true.
func poll(expr string) chromedp.Action[chromedp.Void] {
	p := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(jobTimeout))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := p(ctx, t)
		return chromedp.Void{}, err
	}
}

// What a person sees on the dashboard of a job with a slow sink: the
// job graph with both operators, the source's back-pressured, checkpoints
// completing, numbers that change.
func TestDashboardInBrowser(t *testing.T) {
	ctx := browser(t)
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0", weir.AccessToken("tok")))
	url := "http://" + job.DashboardAddr() + "/#token=tok"

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(url),
		poll(`document.querySelectorAll("#graph .vertex").length === 2`),
	))
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#graph .vertex")].map(g => g.dataset.name)`))
	require.NoError(t, err)
	require.Equal(t, []string{sourceVertex, sinkVertex}, names)

	// The source is marked back-pressured, the sink is not.
	require.NoError(t, chromedp.Do(ctx,
		poll(`document.querySelector("#graph .vertex.backpressured")?.dataset.name === "numbers -> square"`)))
	badge, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#graph .vertex.backpressured .badge").textContent`))
	require.NoError(t, err)
	require.Contains(t, badge, "BACK-PRESSURED")
	sinkBP, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`document.querySelector('#graph .vertex[data-name="slow sink"]').classList.contains("backpressured")`))
	require.NoError(t, err)
	require.False(t, sinkBP, "the sink is busy, not back-pressured")

	// Checkpoint rows appear.
	require.NoError(t, chromedp.Do(ctx, poll(`document.querySelectorAll("#checkpoints tbody tr.status-completed").length > 0`)))
	status, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#checkpoints tbody tr.status-completed td:nth-child(3)").textContent`))
	require.NoError(t, err)
	require.Equal(t, "completed", status)

	// Select the sink, with the mouse: the page redraws as it polls, so
	// a click may hit a node that was just replaced; a person clicks again.
	click := chromedp.Click(chromedp.CSS(`#graph .vertex[data-name="slow sink"]`))
	for try := 1; ; try++ {
		err := chromedp.Do(ctx, click)
		if err == nil {
			break
		}
		require.Less(t, try, 5, "clicking the sink: %v", err)
	}
	require.NoError(t, chromedp.Do(ctx, poll(`document.getElementById("selected-name").textContent === "slow sink"`)))
	// Its subtask's records in change between two reads.
	cell := chromedp.Evaluate[string](`document.querySelector('#subtasks td[data-metric="numRecordsIn"]').textContent`)
	first, err := chromedp.Run(ctx, cell)
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		poll(`document.querySelector('#subtasks td[data-metric="numRecordsIn"]').textContent !== `+jsString(first))))
	second, err := chromedp.Run(ctx, cell)
	require.NoError(t, err)
	require.NotEqual(t, first, second)

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s", shot)
	if dir := os.Getenv("WEIR_SCREENSHOT_DIR"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-graph.png"), png, 0o644))
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// longSinkName does not fit in a job graph box on one line.
const longSinkName = "a sink whose name is far too long for one line of its box in the job graph"

// startOperateJob starts numbers (event time: the generator's index is a
// timestamp in ms) -> fragile, which panics once (one vertex, chained),
// -> a sink with a long name, at parallelism 2, with a savepoint directory, restarting once.
func startOperateJob(t *testing.T, savepoints string) *weir.Job {
	t.Helper()
	var failed atomic.Bool
	env := weir.NewEnvironment(weir.WithJobName("operate"), weir.WithParallelism(2),
		weir.WithDashboard("127.0.0.1:0", weir.AccessToken("tok")),
		weir.WithMetricsInterval(50*time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 150 * time.Millisecond, SavepointDir: savepoints}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(1, 10*time.Millisecond)))
	start := time.Now().Add(-time.Hour).UnixMilli()
	src := weir.FromGenerator(env, -1, func(i int64) int64 { return start + i }, weir.Rate(2000)).Name("numbers")
	ts := weir.AssignTimestamps(src, weir.MonotonousTimestamps(func(x int64) int64 { return x }))
	weir.SinkFunc(weir.Map(ts, func(x int64) int64 {
		if x == start+50 && !failed.Swap(true) {
			panic("boom at fifty")
		}
		return x
	}).Name("fragile").Rebalance(), func(int64) error { return nil }).Name(longSinkName)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		job.Cancel()
		_, _ = job.Wait()
	})
	return job
}

// jsErrors fails the test at its end if the page threw.
func jsErrors(t *testing.T, ctx context.Context) {
	var mu sync.Mutex
	var errs []string
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			mu.Lock()
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			errs = append(errs, fmt.Sprintf("%s:%d:%d: %s", d.URL, d.LineNumber+1, d.ColumnNumber+1, msg))
			mu.Unlock()
		}
	}))
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, errs, "the page's script threw")
	})
}

// clickOn clicks sel, again if the page redrew the node under the mouse.
func clickOn(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	for try := 1; ; try++ {
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		if err == nil {
			return
		}
		require.Less(t, try, 5, "clicking %s: %v", sel, err)
	}
}

func evaluate[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// Operating a job from the page: its failure's stack in the exception
// history, charts that grow, watermarks, a checkpoint's subtasks with the
// slowest highlighted, a savepoint triggered and completed, a flame graph
// of a CPU profile, and boxes that hold their text.
func TestDashboardOperateInBrowser(t *testing.T) {
	ctx := browser(t)
	jsErrors(t, ctx)
	savepoints := t.TempDir()
	job := startOperateJob(t, savepoints)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate("http://"+job.DashboardAddr()+"/#token=tok"),
		poll(`document.querySelectorAll("#graph .vertex").length === 2`),
	))

	// Layout: the long name wraps onto lines that stay inside the box,
	// and shows in full on hover; every line of every box fits.
	lines := evaluate[int](t, ctx, `document.querySelector('#graph .vertex[data-name=`+jsString(longSinkName)+`]').querySelectorAll("text.name").length`)
	require.Greater(t, lines, 1)
	title := evaluate[string](t, ctx, `document.querySelector('#graph .vertex[data-name=`+jsString(longSinkName)+`] title').textContent`)
	require.Contains(t, title, longSinkName)
	overflow := evaluate[[]string](t, ctx, `[...document.querySelectorAll("#graph .vertex")].flatMap(g => {
		const box = g.querySelector("rect.box").getBBox();
		return [...g.querySelectorAll("text")].filter(x => { const b = x.getBBox(); return b.x < 0 || b.x + b.width > box.width || b.y + b.height > box.height + 1; }).map(x => x.textContent);
	})`)
	require.Empty(t, overflow, "text outside its box")
	sticky := evaluate[string](t, ctx, `getComputedStyle(document.querySelector("#subtasks tbody td:first-child") || document.querySelector("#subtasks th")).position`)
	require.Equal(t, "sticky", sticky)

	// The failure's stack in the exception history.
	require.NoError(t, chromedp.Do(ctx, poll(`document.querySelectorAll("#exception-history .exception-entry").length > 0`)))
	stack := evaluate[string](t, ctx, `document.querySelector("#exception-history .exception-entry pre.stack").textContent`)
	require.Contains(t, stack, "boom at fifty")
	require.Contains(t, stack, "dashboard_browser_test.go", "the panic's stack")
	summary := evaluate[string](t, ctx, `document.querySelector("#exception-history .exception-entry summary").textContent`)
	require.Contains(t, summary, "fragile")
	require.Contains(t, summary, "restarted")

	// Watermarks: one row per operator and per subtask, with a lag.
	require.NoError(t, chromedp.Do(ctx, poll(`document.querySelectorAll("#watermarks tbody tr").length === 6`)))
	require.NoError(t, chromedp.Do(ctx, poll(`[...document.querySelectorAll('#watermarks tbody tr.operator td[data-metric="outputLag"]')].some(td => td.textContent.endsWith(" s"))`)))

	// A chart updates: its points grow.
	require.NoError(t, chromedp.Do(ctx, poll(`Number(document.getElementById("chart-out").dataset.points) > 0`)))
	n := evaluate[string](t, ctx, `document.getElementById("chart-out").dataset.points`)
	require.NoError(t, chromedp.Do(ctx, poll(`Number(document.getElementById("chart-out").dataset.points) > `+n)))
	series := evaluate[int](t, ctx, `document.querySelectorAll("#chart-out polyline.series").length`)
	require.Equal(t, 2, series, "one line per operator")
	require.NoError(t, chromedp.Do(ctx, poll(`document.querySelectorAll("#chart-ck-duration circle.dot").length > 0`)))

	// A checkpoint's details: every vertex's subtasks, the slowest
	// highlighted.
	require.NoError(t, chromedp.Do(ctx, poll(`document.querySelectorAll("#checkpoints tbody tr.status-completed").length > 0`)))
	clickOn(t, ctx, `#checkpoints tbody tr.status-completed`)
	require.NoError(t, chromedp.Do(ctx, poll(`!document.getElementById("ck-details").hidden && document.querySelectorAll("#ck-details table.ck-subtasks").length === 2`)))
	rows := evaluate[[]int](t, ctx, `[...document.querySelectorAll("#ck-details table.ck-subtasks")].map(t => t.tBodies[0].rows.length)`)
	require.Equal(t, []int{2, 2}, rows)
	slowest := evaluate[int](t, ctx, `document.querySelectorAll("#ck-details tr.slowest").length`)
	require.Equal(t, 2, slowest, "one slowest subtask per operator")
	require.Equal(t, "COMPLETED", evaluate[string](t, ctx, `document.getElementById("ck-details").dataset.status`))

	// A savepoint from the page, after a confirmation.
	require.NoError(t, chromedp.Do(ctx, poll(`!document.getElementById("action-savepoint").disabled`)))
	clickOn(t, ctx, `#action-savepoint`)
	require.NoError(t, chromedp.Do(ctx, poll(`document.getElementById("confirm").open`)))
	clickOn(t, ctx, `#confirm-ok`)
	require.NoError(t, chromedp.Do(ctx, poll(`document.getElementById("action-status").dataset.state === "completed"`)))
	status := evaluate[string](t, ctx, `document.getElementById("action-status").textContent`)
	require.Contains(t, status, "savepoint "+savepoints)
	entries, err := os.ReadDir(savepoints)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "the savepoint is on disk")
	require.Equal(t, "running", job.Metrics().State, "a savepoint does not stop the job")

	// The workers view: this process, with its Go heap and goroutines.
	require.NoError(t, chromedp.Do(ctx, poll(`document.querySelectorAll("#workers tbody tr[data-worker=local]").length === 1 && !document.getElementById("workers-section").hidden`)))
	heap := evaluate[string](t, ctx, `document.querySelector('#workers tbody td[data-metric="heapBytes"]').textContent`)
	require.Contains(t, heap, "iB")

	// A flame graph of a one-second CPU profile.
	// (Pressed from the script, as below: the page may still grow.)
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#profile-seconds"), "1")))
	require.True(t, evaluate[bool](t, ctx, `(document.getElementById("profile-start").click(), true)`))
	require.NoError(t, chromedp.Do(ctx, poll(`document.getElementById("profile-status").dataset.state === "completed"`)))
	frames := evaluate[int](t, ctx, `document.querySelectorAll("#flame .frame").length`)
	require.Greater(t, frames, 1)
	require.Equal(t, "root", evaluate[string](t, ctx, `document.querySelector("#flame .frame").dataset.name`))
	// A job in one process has no worker to choose.
	require.Equal(t, 1, evaluate[int](t, ctx, `document.querySelectorAll("#profile-worker option").length`))

	// README's screenshot: WEIR_SCREENSHOT_DIR=docs go test -run TestDashboardOperateInBrowser .
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	if dir := os.Getenv("WEIR_SCREENSHOT_DIR"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644))
	}
}

// A cluster job's page profiles a worker chosen in the flame graph
// panel: the worker records it (its log says so) and the page draws it.
func TestDashboardWorkerProfileInBrowser(t *testing.T) {
	ctx := browser(t)
	jsErrors(t, ctx)
	job, c, logs := startClusterDashboard(t)
	t.Cleanup(func() {
		job.Cancel()
		_, _ = job.Wait()
		c.wg.Wait()
	})
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("http://"+job.DashboardAddr()+"/")))
	waitFor(t, "the page offers both workers", func() bool {
		m := job.Metrics()
		require.NotContains(t, []string{"failed", "canceled", "finished"}, m.State, "the job ended: %+v", m.LatestException)
		return evaluate[int](t, ctx, `document.querySelectorAll("#profile-worker option").length`) == 3
	})
	options := evaluate[[]string](t, ctx, `[...document.querySelectorAll("#profile-worker option")].map(o => o.value)`)
	require.Equal(t, []string{"", "w1", "w2"}, options, "the coordinator's process, then each worker")
	// The button is pressed from the script: the page grows as its
	// sections fill in, and a mouse click may land where the button was.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#profile-worker"), "w2"),
		chromedp.SetValue(chromedp.CSS("#profile-seconds"), "1"),
	))
	require.True(t, evaluate[bool](t, ctx, `(document.getElementById("profile-start").click(), true)`))
	require.NoError(t, chromedp.Do(ctx,
		poll(`["completed", "failed"].includes(document.getElementById("profile-status").dataset.state)`)))
	st := evaluate[string](t, ctx, `document.getElementById("profile-status").textContent`)
	require.Equal(t, "completed", evaluate[string](t, ctx, `document.getElementById("profile-status").dataset.state`), st)
	require.Contains(t, st, "worker w2: ")
	require.Greater(t, evaluate[int](t, ctx, `document.querySelectorAll("#flame .frame").length`), 1)
	require.Equal(t, 1, profilesRecorded(logs, "w2"))
	require.Zero(t, profilesRecorded(logs, "w1"))
}
