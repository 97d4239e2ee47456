package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/dashboard"
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
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := httpGet(t, base+"/snapshot?resource=mysql/main")
		var ev dashboard.Event
		if code != http.StatusOK || json.Unmarshal([]byte(body), &ev) != nil {
			t.Fatalf("/snapshot: %d %.300s", code, body)
		}
		s := ev.Snapshot
		if s != nil && s.Serving && s.Resource != nil && len(s.Resource.Top) == 1 {
			if s.Role != "leader" || s.Node != "root" || s.Resource.Top[0].ID != "c1" || s.Resource.Top[0].Has != 7 || s.Resource.Capacity != 500 || s.Config == nil {
				t.Fatalf("snapshot %.600s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease of c1 on the dashboard: %.600s", body)
		}
	}
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
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, body := httpGet(t, base[1]+"/snapshot")
		var ev dashboard.Event
		if code != http.StatusOK || json.Unmarshal([]byte(body), &ev) != nil {
			t.Fatalf("/snapshot: %d %.300s", code, body)
		}
		for _, q := range ev.Quota {
			if q.Name == "logins" && q.Events["served"] >= 2 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota namespaces on the dashboard: %+v", ev.Quota)
		}
	}
}
