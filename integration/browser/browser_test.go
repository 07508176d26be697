package browser

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// bound is how long a tab may take to show what the server's stream says.
const bound = 5 * time.Second

// chromium returns the browser's path, installing Debian's package when it
// is missing; it fails under CI=true and skips otherwise when that fails.
func chromium(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../../scripts/install-chromium.sh").Output()
	path := strings.TrimSpace(string(out))
	if err != nil || path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is missing and scripts/install-chromium.sh failed: %v", err)
		}
		t.Skipf("chromium is missing and could not be installed: %v", err)
	}
	return path
}

// serve builds cmd/fence-demo and starts `fence-demo serve` on a free port
// against a private schema and bucket; it returns the base URL.
func serve(t *testing.T, schema, bucket string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fence-demo")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fence-demo")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fence-demo: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--stall", "4s",
		"--database-url", fencetest.DatabaseURL(), "--schema", schema, "--bucket", bucket)
	cmd.Env = os.Environ()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("fence-demo serve printed no address: %v", err)
	}
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("fence-demo serve: unexpected first line %q", line)
	}
	return strings.TrimSuffix(strings.Fields(line[i:])[0], "/")
}

func post(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Post(url, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}

// within runs actions with the bound as deadline and reports how long they
// took.
func within(t *testing.T, tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, bound)
	defer cancel()
	start := time.Now()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s (within %v): %v", what, bound, err)
	}
	d := time.Since(start)
	t.Logf("%s: %v", what, d.Round(time.Millisecond))
	return d
}

func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("out", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("out", name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTwoTabs opens one conversation as "desktop" and "browser", takes over
// in the browser tab, and checks that the desktop tab turns read-only, that
// the desktop's stalled write comes back refused, and that a tab whose
// stream was cut shows the current owner when it reconnects.
func TestTwoTabs(t *testing.T) {
	exe := chromium(t)
	schema := fencetest.Schema(t, migrations.Lease, migrations.Guard)
	_, bucket := fencetest.Bucket(t)
	base := serve(t, schema, bucket)
	session := "conv-" + uuid.NewString()[:8]

	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(900, 720))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	desktop, cancelDesk := chromedp.NewContext(alloc)
	defer cancelDesk()
	// Start the browser, then open the second tab in it, on contexts
	// without a deadline (a deadline on a first run would end it).
	if err := chromedp.Do(desktop); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	browser, cancelBrow := chromedp.NewContext(desktop)
	defer cancelBrow()
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("opening the second tab: %v", err)
	}
	page := func(dev string) string { return base + "/?session=" + session + "&device=" + dev }

	// The desktop starts the run; the browser tab sees it owned elsewhere.
	within(t, desktop, "desktop opens", chromedp.Navigate(page("desktop")),
		chromedp.WaitVisible(`#start`), chromedp.Click(`#start`),
		chromedp.WaitVisible(`body[data-mine="1"][data-owner="desktop"]`))
	within(t, browser, "browser opens and sees the desktop as owner", chromedp.Navigate(page("browser")),
		chromedp.WaitVisible(`body[data-mine="0"][data-owner="desktop"]`),
		chromedp.WaitVisible(`#continue`), chromedp.WaitReady(`#composer[readonly]`))

	// The desktop sends a tool call whose network stalls; meanwhile the
	// browser continues here and writes.
	within(t, desktop, "desktop sends a stalled tool call", chromedp.Click(`#run-stalled`),
		chromedp.WaitVisible(`#log li.pending`))
	within(t, browser, "browser continues here", chromedp.Click(`#continue`),
		chromedp.WaitVisible(`body[data-mine="1"][data-owner="browser"]`))
	took := within(t, desktop, "desktop turns read-only",
		chromedp.WaitVisible(`body[data-mine="0"][data-owner="browser"]`), chromedp.WaitReady(`#composer[readonly]`),
		chromedp.WaitVisible(`#continue`))
	t.Logf("desktop read-only %v after the takeover returned", took.Round(time.Millisecond))
	within(t, browser, "browser's write is accepted", chromedp.Click(`#run`),
		chromedp.WaitVisible(`#log li[data-outcome="accepted"]`))
	within(t, desktop, "desktop's late write is refused", chromedp.WaitVisible(`#log li[data-outcome="refused"]`))
	late, err := chromedp.Run(desktop, chromedp.Text(`#log li[data-outcome="refused"]`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(late, "stale token") {
		t.Fatalf("the late write's outcome %q does not name the stale token", late)
	}
	screenshot(t, desktop, "desktop-after-takeover.png")
	screenshot(t, browser, "browser-owner.png")

	// A network cut: the desktop's stream drops and cannot reconnect while
	// a third device (a phone, here a Manager of this test) takes over.
	post(t, base+"/api/cut?device=desktop&on=1")
	within(t, desktop, "desktop notices the cut", chromedp.WaitVisible(`#conn.down`))
	var m *lease.Manager
	m, err = lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Takeover(context.Background(), lease.Key{AccountID: "acme", SessionID: session}, lease.WithHolder("phone"))
	if err != nil {
		t.Fatal(err)
	}
	within(t, browser, "browser (connected) sees the phone", chromedp.WaitVisible(`body[data-owner="phone"][data-mine="0"]`))
	owner, err := chromedp.Run(desktop, chromedp.Text(`#owner`))
	if err != nil {
		t.Fatal(err)
	}
	if owner != "browser" {
		t.Fatalf("while cut, the desktop tab shows %q; want its last known owner \"browser\"", owner)
	}
	post(t, base+"/api/cut?device=desktop&on=0")
	within(t, desktop, "desktop reconnects and shows the current owner",
		chromedp.WaitVisible(`#conn.live`),
		chromedp.WaitVisible(`body[data-owner="phone"][data-mine="0"][data-token="`+l.Token().String()+`"]`))
	screenshot(t, desktop, "desktop-reconnected.png")
}
