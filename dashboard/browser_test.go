package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/dashboard"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/quotaserver"
	"github.com/allot/allot/replica"
)

// stack is an embedded NATS server, a configuration bucket and watcher, a
// coordinator on its templates and a dashboard served over HTTP.
type stack struct {
	nc  *nats.Conn
	kv  jetstream.KeyValue
	c   *coordinator.Coordinator
	url string // the dashboard's page
	// stopRun ends the dashboard's Run.
	stopRun context.CancelFunc
}

func startStack(t *testing.T, ctx context.Context, interval, history time.Duration) *stack {
	t.Helper()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := configkv.OpenBucket(ctx, js, configkv.DefaultBucket, true)
	if err != nil {
		t.Fatal(err)
	}
	putTemplate(t, ctx, kv, `{"identifier_glob":"db","capacity":100,"algorithm":{"kind":"FAIR_SHARE","lease_length":"10s","refresh_interval":"1s"}}`)
	w := configkv.NewWatcher(kv, nil, nil)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	// TestTenThousandClaimants sends 10,000 requests at once: none may be
	// refused for overload.
	c := coordtest.Start(t, nc, coordinator.Options{Templates: sources.WatchedTemplates(w), RoundInterval: 5 * time.Millisecond,
		Intake: intake.Limits{MaxInFlight: 16384}})
	url, stop := serveDashboard(t, dashboard.Options{Source: c, Conn: nc, Interval: interval, History: history})
	return &stack{nc: nc, kv: kv, c: c, url: url, stopRun: stop}
}

// serveDashboard runs a dashboard and serves it over HTTP until the test
// ends; it returns the page's URL and a function that ends its Run.
func serveDashboard(t *testing.T, opts dashboard.Options) (string, context.CancelFunc) {
	t.Helper()
	d, err := dashboard.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(rctx)
	}()
	srv := httptest.NewServer(d.Handler("/dashboard"))
	// Stop streams first: the server's Close waits for open handlers.
	t.Cleanup(func() {
		cancel()
		<-done
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + "/dashboard/", cancel
}

func putTemplate(t *testing.T, ctx context.Context, kv jetstream.KeyValue, value string) {
	t.Helper()
	if _, err := kv.Put(ctx, config.Key("db"), []byte(value)); err != nil {
		t.Fatal(err)
	}
}

// client is an agent holding a rate limiter on db with fixed wants.
func client(t *testing.T, nc *nats.Conn, id string, wants float64) *agent.Agent {
	t.Helper()
	a, err := agent.New(nc, agent.WithClientID(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if _, err := a.Rate("db", agent.WithWants(wants)); err != nil {
		t.Fatal(err)
	}
	return a
}

// page is what the test reads off the rendered page.
type page struct {
	Capacity, Granted, Wants, Claimants, Rejected, Gen, Quota, Domain, Note, Role, Shadow string
	Rows                                                                                  []string
	ChartPoints                                                                           int
	Missing                                                                               bool
	QuotaRows, DomainRows                                                                 []string
}

const readPage = `(() => {
  const t = (id) => document.getElementById(id).textContent;
  const line = document.querySelector('#chart polyline.granted');
  return {
    Capacity: t('res-capacity'), Granted: t('res-granted'), Wants: t('res-wants'), Claimants: t('res-claimants'),
    Rejected: t('config-rejected'), Gen: t('config-gen'), Note: t('claimants-note'), Role: t('role'), Shadow: t('res-shadow'),
    Quota: document.getElementById('quota-empty').hidden ? '' : t('quota-empty'),
    Domain: document.getElementById('domain-empty').hidden ? '' : t('domain-empty'),
    Rows: [...document.querySelectorAll('#claimants tbody tr')].map((r) => [...r.cells].slice(0, 3).map((c) => c.textContent).join('|')),
    ChartPoints: line ? line.getAttribute('points').split(' ').filter((s) => s).length : 0,
    Missing: !document.getElementById('res-missing').hidden,
    QuotaRows: [...document.querySelectorAll('#quota tbody tr')].map((r) => [...r.cells].map((c) => c.textContent).join('|')),
    DomainRows: [...document.querySelectorAll('#domain tbody tr')].map((r) => [...r.cells].map((c) => c.textContent).join('|')),
  };
})()`

// waitPage reads the page until ok accepts it, failing after a while with
// what it last showed.
func waitPage(t *testing.T, ctx context.Context, b *browser, what string, ok func(p page) bool) page {
	t.Helper()
	var p page
	poll.For(t, 30*time.Second, 100*time.Millisecond, func() error {
		p = page{}
		if err := b.Eval(ctx, readPage, &p); err != nil || !ok(p) {
			js, _ := json.Marshal(p)
			return fmt.Errorf("page never showed %s; last read (err %v): %s", what, err, js)
		}
		return nil
	})
	return p
}

// browser is a headless Chromium with one page, driven through chromedp
// (the Go ecosystem's DevTools-protocol client).
type browser struct{ ctx context.Context }

// findChromium returns the path of a Chromium binary: $ALLOT_CHROMIUM if
// set, else the first of chromium, chromium-browser, google-chrome-stable
// and google-chrome on $PATH; "" if there is none.
func findChromium() string {
	if p := os.Getenv("ALLOT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts a headless Chromium for the test, or skips the test
// when there is none.
func startBrowser(t *testing.T, ctx context.Context) *browser {
	t.Helper()
	bin := findChromium()
	if bin == "" {
		t.Skip("no Chromium binary (chromium, chromium-browser, google-chrome or $ALLOT_CHROMIUM): apt-get install chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000), chromedp.NoSandbox)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The first action starts the browser: fail here, not in the first step.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	return &browser{ctx: bctx}
}

// Navigate loads url and waits for it to load.
func (b *browser) Navigate(ctx context.Context, url string) error {
	_, err := run(ctx, b, chromedp.Navigate(url))
	return err
}

// Eval evaluates expr in the page and decodes its JSON value into out
// (nil: ignore it).
func (b *browser) Eval(ctx context.Context, expr string, out any) error {
	raw, err := run(ctx, b, chromedp.Evaluate[[]byte](expr))
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// Screenshot returns a PNG of the whole page.
func (b *browser) Screenshot(ctx context.Context) ([]byte, error) {
	return run(ctx, b, chromedp.FullScreenshot(100))
}

// run runs a on b's page, ending when ctx does (the browser lives on).
func run[T any](ctx context.Context, b *browser, a chromedp.Action[T]) (T, error) {
	rctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	return chromedp.Run(rctx, a)
}

// TestDashboardInChromium loads the dashboard in a real headless Chromium
// against an embedded coordinator, drives real agents and configuration
// puts, and checks that the numbers on the page follow: the grants, the
// claimants (and a search among them), the chart, a rejected put with its
// error, a capacity change, and a client leaving.
func TestDashboardInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := startBrowser(t, ctx)
	st := startStack(t, ctx, 250*time.Millisecond, time.Minute)
	client(t, st.nc, "alpha", 30)
	beta := client(t, st.nc, "beta", 100)

	if err := b.Navigate(ctx, st.url+"?resource=db"); err != nil {
		t.Fatal(err)
	}

	// Capacity 100, fair share of wants 30 and 100: 30 and 70.
	p := waitPage(t, ctx, b, "grants 30 and 70", func(p page) bool {
		return p.Capacity == "100" && p.Granted == "100" && p.Wants == "130" && p.Claimants == "2" &&
			slices.Equal(p.Rows, []string{"beta|70|100", "alpha|30|30"})
	})
	if p.Rejected != "none" || p.Gen == "–" || p.Role != "standalone (no election)" || p.Quota != "no quota namespaces" || p.Shadow != "no" ||
		p.Domain != "no domain partitions" || len(p.DomainRows) != 0 {
		t.Fatalf("node, configuration, quota or domain panel: %+v", p)
	}
	gen := p.Gen
	// A float sum of grants off by rounding noise reads as the round
	// number, not 100.0.
	var shown []string
	if err := b.Eval(ctx, `[fmt(100.00000000000345), fmt(99.99999999999), fmt(17.5), fmt(12345)]`, &shown); err != nil ||
		!slices.Equal(shown, []string{"100", "100", "17.50", "12.3k"}) {
		t.Fatalf("number format: %v %q", err, shown)
	}
	waitPage(t, ctx, b, "a chart with several samples", func(p page) bool { return p.ChartPoints >= 3 })

	// Search among the claimants, as typed into the page.
	if err := b.Eval(ctx, `(() => { const s = document.getElementById('search'); s.value = 'ALP'; s.dispatchEvent(new Event('input')); })()`, nil); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, b, "only alpha for the search", func(p page) bool {
		return slices.Equal(p.Rows, []string{"alpha|30|30"}) && strings.Contains(p.Note, "showing 1 of 1 matching")
	})
	if err := b.Eval(ctx, `(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); })()`, nil); err != nil {
		t.Fatal(err)
	}

	// An invalid put is rejected: the page names it with its error, and
	// the coordinator keeps serving the last good version.
	putTemplate(t, ctx, st.kv, `{"identifier_glob":"db","capacity":-5,"algorithm":{"kind":"FAIR_SHARE"}}`)
	p = waitPage(t, ctx, b, "the rejected put", func(p page) bool {
		return strings.Contains(p.Rejected, "templates.db revision") && strings.Contains(p.Rejected, "capacity")
	})
	if p.Gen != gen || p.Capacity != "100" {
		t.Fatalf("a rejected put changed the configuration: %+v (generation was %s)", p, gen)
	}

	// A valid put lowers the capacity to 60: 30 and 30 (ties listed by
	// larger wants first), in shadow mode, which allocates as usual.
	putTemplate(t, ctx, st.kv, `{"identifier_glob":"db","capacity":60,"algorithm":{"kind":"FAIR_SHARE","lease_length":"10s","refresh_interval":"1s"},"shadow":true}`)
	p = waitPage(t, ctx, b, "capacity 60 shared 30/30, in shadow mode", func(p page) bool {
		return p.Capacity == "60" && p.Granted == "60" && slices.Equal(p.Rows, []string{"beta|30|100", "alpha|30|30"}) &&
			p.Shadow == "yes: agents admit their wants"
	})
	if p.Gen == gen || p.Rejected != "none" {
		t.Fatalf("after a valid put: %+v (generation was %s)", p, gen)
	}

	// beta leaves: its lease is released at once.
	if err := beta.Close(); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, b, "alpha alone", func(p page) bool {
		return p.Granted == "30" && p.Wants == "30" && p.Claimants == "1" && slices.Equal(p.Rows, []string{"alpha|30|30"})
	})

	// A quota server starts serving namespace logins: the quota panel
	// lists it with the takes it served.
	startQuota(t, ctx, st.nc)
	for range 2 {
		if m, err := st.nc.Request(quotaserver.TakeSubject("root"), []byte(`{"bucket":"logins:alice"}`), 5*time.Second); err != nil || !strings.Contains(string(m.Data), `"status":"OK"`) {
			t.Fatalf("take: %v %s", err, m.Data)
		}
	}
	waitPage(t, ctx, b, "the quota namespace", func(p page) bool {
		return p.Quota == "" && slices.Contains(p.QuotaRows, "0|logins|served 2, tokens 2")
	})

	// A domain partition's leader serves namespace app: a hit granted, a
	// hold of 2 copies granted and one more refused (the domain's limit
	// is 2). The domain panel lists the partition with its hold.
	term := startDomain(t, ctx, st.nc)
	for _, c := range []struct{ op, res, body, want string }{
		{domainwire.OpRequest, "api", `{"domain":"a"}`, `"granted":1`},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","copies":2,"client_id":"c1"}`, `"granted":2`},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","copies":1,"client_id":"c2"}`, `"domain_holds":2`},
	} {
		m, err := st.nc.Request(domainwire.Subject("root", c.op, "app", c.res), []byte(c.body), 5*time.Second)
		if err != nil || !strings.Contains(string(m.Data), c.want) || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("%s %s %s: %v %s", c.op, c.res, c.body, err, m.Data)
		}
	}
	want := fmt.Sprintf("0|domain-1|%d|serving|1|2|0|requests 1/0 · reserves 1/1 · expired 0", term)
	waitPage(t, ctx, b, "the domain partition with its hold", func(p page) bool {
		return p.Domain == "" && slices.Equal(p.DomainRows, []string{want})
	})

	// Open a resource nobody asked for by id, then go back to db by
	// clicking its row in the resource table.
	if err := b.Eval(ctx, `(() => { document.getElementById('open-id').value = 'nobody/asked'; document.getElementById('open-form').requestSubmit(); })()`, nil); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, b, "an unknown resource", func(p page) bool { return p.Missing && p.Capacity == "–" && len(p.Rows) == 0 })
	if err := b.Eval(ctx, `document.querySelector('#resources tbody tr[data-id="db"]').click()`, nil); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, b, "db again", func(p page) bool { return !p.Missing && p.Capacity == "60" && len(p.Rows) == 1 })

	if out := os.Getenv("ALLOT_DASHBOARD_SCREENSHOT"); out != "" {
		screenshot(t, ctx, b, st, out)
	}
}

// screenshot fills the page a little (more clients, a minute of history)
// and saves a PNG of it to out: docs/dashboard.png is made this way.
func screenshot(t *testing.T, ctx context.Context, b *browser, st *stack, out string) {
	for i, w := range []float64{5, 8, 12, 20} {
		client(t, st.nc, fmt.Sprintf("checkout-%d", i+1), w)
	}
	time.Sleep(30 * time.Second)
	png, err := b.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot written to %s", out)
}

// TestTreeDashboardInChromium: over a real two-level tree (a child level
// joined to the root by a leaf-node link), the child's page shows its
// parent and its lease from it, and the root's page lists the child node
// with what it holds and wants, as a real agent at the child asks.
func TestTreeDashboardInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := startBrowser(t, ctx)
	root := natstest.Root(t, "root")
	child := natstest.Child(t, "child", root)
	rnc, cnc := natstest.Conn(t, root.Server), natstest.Conn(t, child.Server)
	tm := &config.Template{Name: "db", Glob: "db", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 10 * time.Second}
	tmpls := sources.StaticTemplates(config.NewSet(1, []*config.Template{tm}, nil))
	rc := coordtest.Start(t, rnc, coordinator.Options{Node: "root", Templates: tmpls, RoundInterval: 5 * time.Millisecond})
	cc := coordtest.Start(t, cnc, coordinator.Options{Node: "child", Parent: "root", Templates: tmpls, RoundInterval: 5 * time.Millisecond})
	rootURL, _ := serveDashboard(t, dashboard.Options{Source: rc, Conn: rnc, Interval: 250 * time.Millisecond})
	childURL, _ := serveDashboard(t, dashboard.Options{Source: cc, Conn: cnc, Interval: 250 * time.Millisecond})
	a, err := agent.New(cnc, agent.WithClientID("svc"), agent.WithNode("child"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Rate("db", agent.WithWants(40)); err != nil {
		t.Fatal(err)
	}

	type treePage struct{ Parent, Lease, Children, Rows string }
	read := `(() => {
	  const t = (id) => document.getElementById(id).textContent;
	  return { Parent: t('parent'), Lease: t('res-lease'), Children: t('children'),
	    Rows: [...document.querySelectorAll('#claimants tbody tr')].map((r) => r.cells[0].textContent).join(',') };
	})()`
	wait := func(url, what string, ok func(p treePage) bool) {
		t.Helper()
		if err := b.Navigate(ctx, url+"?resource=db"); err != nil {
			t.Fatal(err)
		}
		poll.For(t, 30*time.Second, 100*time.Millisecond, func() error {
			var p treePage
			if err := b.Eval(ctx, read, &p); err != nil || !ok(p) {
				return fmt.Errorf("%s never showed %s: %+v (%v)", url, what, p, err)
			}
			return nil
		})
	}
	wait(childURL, "its parent and lease", func(p treePage) bool {
		return p.Parent == "root" && strings.HasPrefix(p.Lease, "40 (") && p.Rows == "svc" && p.Children == "none"
	})
	wait(rootURL, "the child node", func(p treePage) bool {
		return p.Parent == "– (root)" && p.Children == "child · has 40 · wants 40 · 1 client in 1 band" && p.Rows == "child (child node)"
	})
}

// startQuota runs a quota server (one partition) with namespace logins
// until the test ends, and waits until it serves.
func startQuota(t *testing.T, ctx context.Context, nc *nats.Conn) {
	t.Helper()
	cfg := &quota.Config{Namespaces: map[string]*quota.Namespace{"logins": {Name: "logins", Buckets: map[string]*quota.Spec{
		"alice": {Algorithm: quota.TokenBucket, Size: 5, FillRate: 1, MaxDebt: 10 * time.Second, MaxTokensPerRequest: 10}}}}}
	r, err := quotaserver.NewReplica(nc, quotaserver.ReplicaOptions{
		Options:  quotaserver.Options{ServerID: "quota-1", Partitions: 1, Config: sources.QuotaFunc(func() *quota.Config { return cfg }), Logger: slog.New(slog.DiscardHandler)},
		Election: replica.Election{TTL: 10 * time.Second}, // a lone replica: no failover to wait for, and no lapse on a loaded machine
	})
	if err != nil {
		t.Fatal(err)
	}
	runServing(t, ctx, "the quota server", r.Run, func() bool { return r.Status().Serving })
}

// runServing runs run until the test ends and waits until serving
// reports true.
func runServing(t *testing.T, ctx context.Context, what string, run func(context.Context) error, serving func() bool) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = run(rctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	poll.Until(t, time.Minute, what+" serving", serving)
}

// startDomain runs a domain partition's replica (one partition, node
// root) with namespace app until the test ends, waits until it serves and
// returns its term. Namespace app has a rate resource api and a copy
// resource sandbox, of which a domain holds at most 2 copies.
func startDomain(t *testing.T, ctx context.Context, nc *nats.Conn) uint64 {
	t.Helper()
	nss := map[string]*domainlimit.Namespace{"app": {Name: "app", Resources: map[string]domainlimit.Resource{
		"api": {Name: "api", Kind: domainlimit.KindRate, Rate: domainlimit.RateSpec{Hard: 5, Global: domainlimit.Unlimited,
			Tiers: []domainlimit.Tier{{Limit: 5, Window: time.Second, Active: 10 * time.Second, Cooldown: 10 * time.Second}}}},
		"sandbox": {Name: "sandbox", Kind: domainlimit.KindCopies, Copies: domainlimit.CopySpec{DomainLimit: 2, GlobalLimit: domainlimit.Unlimited}},
	}}}
	// No client refreshes the hold: it lives longer than the test.
	r, err := domainserver.NewReplica(nc, domainserver.ReplicaOptions{
		Options: domainserver.Options{ServerID: "domain-1", HoldTTL: 5 * time.Minute,
			Config: sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return nss }), Logger: slog.New(slog.DiscardHandler)},
		Election: replica.Election{TTL: 10 * time.Second}, // a lone replica: no failover to wait for, and no lapse on a loaded machine
	})
	if err != nil {
		t.Fatal(err)
	}
	var term uint64
	runServing(t, ctx, "the domain partition", r.Run, func() bool {
		srv := r.Server()
		if srv == nil {
			return false
		}
		st := srv.Stats()
		term = st.Term
		return st.Serving
	})
	return term
}
