package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/dashboard"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/webtest"
	"github.com/allot/allot/quotaserver"
)

// TestUpServesDashboard: `allot up` prints the dashboard's URL, serves the
// page there beside /metrics, and its snapshot shows the leading replica
// and the lease a get took, with the configuration's status.
func TestUpServesDashboard(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	base := up.printed(t, regexp.MustCompile(`dashboard at (http://127\.0\.0\.1:\d+)/`), "the dashboard URL")[1]
	if code, body := httpGet(t, base+"/"); code != http.StatusOK || !strings.Contains(body, "<title>allot dashboard</title>") {
		t.Fatalf("/: %d %.200s", code, body)
	}
	if code, body := httpGet(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "allot_") {
		t.Fatalf("/metrics beside the dashboard: %d %.200s", code, body)
	}
	if code, out := runCtx(context.Background(), "get", "--nats", up.url, "mysql/main", "--wants", "7", "--client", "c1"); code != 0 {
		t.Fatalf("get: %d %s", code, out)
	}
	poll.For(t, 10*time.Second, 100*time.Millisecond, func() error {
		code, body := httpGet(t, base+"/snapshot?resource=mysql/main")
		var ev dashboard.Event
		if code != http.StatusOK || json.Unmarshal([]byte(body), &ev) != nil {
			t.Fatalf("/snapshot: %d %.300s", code, body)
		}
		s := ev.Snapshot
		if s == nil || !s.Serving || s.Resource == nil || len(s.Resource.Top) != 1 {
			return fmt.Errorf("no lease of c1 on the dashboard: %.600s", body)
		}
		if s.Role != "leader" || s.Node != "root" || s.Resource.Top[0].ID != "c1" || s.Resource.Top[0].Has != 7 || s.Resource.Capacity != 500 || s.Config == nil {
			t.Fatalf("snapshot %.600s", body)
		}
		return nil
	})
	up.wait(t)
}

// TestUpDashboardShowsQuota: the quota servers `allot up` runs report
// their namespaces' events, and the dashboard lists them: after two takes
// on a namespace put with `allot config put`, it shows them served.
func TestUpDashboardShowsQuota(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	base := up.printed(t, regexp.MustCompile(`dashboard at (http://127\.0\.0\.1:\d+)/`), "the dashboard URL")
	nc, err := nats.Connect(up.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if code, out, errs := runCLI(t, `{"buckets": {"k": {"size": 5, "fill_rate": 0.01, "wait_timeout": "0s"}}}`,
		"config", "put", "--nats", up.url, "namespaces.logins", "-"); code != 0 {
		t.Fatalf("config put: exit %d: %s%s", code, out, errs)
	}
	served := func(r map[string]any) bool { return r["status"] == "OK" }
	quotaTakeUntil(t, nc, quotaserver.BucketSubject("root", "take", "logins", "k"), `{}`, served)
	quotaTakeUntil(t, nc, quotaserver.BucketSubject("root", "take", "logins", "k"), `{}`, served)
	poll.For(t, 15*time.Second, 200*time.Millisecond, func() error {
		code, body := httpGet(t, base[1]+"/snapshot")
		var ev dashboard.Event
		if code != http.StatusOK || json.Unmarshal([]byte(body), &ev) != nil {
			t.Fatalf("/snapshot: %d %.300s", code, body)
		}
		for _, q := range ev.Quota {
			if q.Name == "logins" && q.Events["served"] >= 2 {
				return nil
			}
		}
		return fmt.Errorf("quota namespaces on the dashboard: %+v", ev.Quota)
	})
}

// TestDashboardBeyondLoopback: with --metrics-addr beyond loopback and no
// token the dashboard is off (403 saying how to turn it on) while
// /metrics is served; with --dashboard-token (or $ALLOT_DASHBOARD_TOKEN)
// it requires the token, and answers the Host names of IP addresses,
// localhost, and --dashboard-hosts only. A short token is refused at
// start, naming the flag.
func TestDashboardBeyondLoopback(t *testing.T) {
	port := regexp.MustCompile(`metrics at http://[^/]*:(\d+)/metrics`)
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "0.0.0.0:0")
	base := "http://127.0.0.1:" + up.printed(t, port, "the metrics URL")[1]
	if !strings.Contains(up.out.String(), "dashboard off: --metrics-addr listens beyond loopback") {
		t.Errorf("up does not say the dashboard is off:\n%s", up.out.String())
	}
	if code, body := httpGet(t, base+"/"); code != http.StatusForbidden || !strings.Contains(body, "--dashboard-token") {
		t.Fatalf("/ without a token: %d %.200s", code, body)
	}
	if code, _ := httpGet(t, base+"/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	up.wait(t)

	const token = "a-token-of-32-characters-exactly"
	t.Setenv(dashboardTokenEnv, token)
	up = startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "0.0.0.0:0", "--dashboard-hosts", "dash.example, other.example")
	base = "http://127.0.0.1:" + up.printed(t, port, "the metrics URL")[1]
	for _, tc := range []struct {
		path, host, token string
		code              int
	}{
		{"/", "", "", http.StatusUnauthorized},
		{"/snapshot", "", "wrong-token-of-32-characters-too", http.StatusUnauthorized},
		{"/", "", token, http.StatusOK},
		{"/snapshot", "localhost:9464", token, http.StatusOK},
		{"/snapshot", "dash.example:9464", token, http.StatusOK},
		{"/snapshot", "other.example", token, http.StatusOK},
		{"/snapshot", "evil.example:9464", token, http.StatusForbidden},
		{"/metrics", "", "", http.StatusOK},
	} {
		if resp, body := webtest.Get(t, base+tc.path, tc.host, webtest.Bearer(tc.token)...); resp.StatusCode != tc.code {
			t.Errorf("%s, Host %q, token %q: %s %.200s; want %d", tc.path, tc.host, tc.token, resp.Status, body, tc.code)
		}
	}
	up.wait(t)

	t.Setenv(dashboardTokenEnv, "")
	for _, cmd := range [][]string{{"up", "--data-dir", t.TempDir()}, {"coordinator", "--nats", "nats://127.0.0.1:1"}} {
		args := append(cmd, "--dashboard-token", "short")
		if code, out := runCtx(context.Background(), args...); code == 0 || !strings.Contains(out, "--dashboard-token (or $ALLOT_DASHBOARD_TOKEN) has 5 characters: want at least 16") {
			t.Errorf("%q: exit %d, %s", args, code, out)
		}
	}
}
