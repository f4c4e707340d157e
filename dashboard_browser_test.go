package weir_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644))
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
