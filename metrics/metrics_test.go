package metrics_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/metrics"
	"github.com/allot/allot/proto/allotpb"
)

// scrape fetches url and parses it with the Prometheus text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels
// include want, and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// waitFor scrapes until check passes or 5s pass (resource gauges refresh
// every second).
func waitFor(t *testing.T, url, what string, check func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	poll.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if fams = scrape(t, url); !check(fams) {
			return errors.New(what)
		}
		return nil
	})
	return fams
}

func request(t *testing.T, nc *nats.Conn, subject string, body []byte) *nats.Msg {
	t.Helper()
	m, err := nc.Request(subject, body, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	return m
}

func get(t *testing.T, nc *nats.Conn, client, resource string, wants float64) float64 {
	t.Helper()
	body := fmt.Sprintf(`{"client_id":%q,"resource":[{"resource_id":%q,"wants":%g}]}`, client, resource, wants)
	m := request(t, nc, "allot.root.capacity.get", []byte(body))
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("get %s: error %s %s", resource, code, m.Header.Get("Nats-Service-Error"))
	}
	var resp struct {
		Response []struct {
			Gets struct {
				Capacity float64 `json:"capacity"`
			} `json:"gets"`
		} `json:"response"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil || len(resp.Response) != 1 {
		t.Fatalf("reply %s: %v", m.Data, err)
	}
	return resp.Response[0].Gets.Capacity
}

// TestCoordinatorMetrics drives a real coordinator with requests and
// checks, in the scraped and parsed exposition, that the resource gauges
// follow the lease granted, that requests and error replies are counted
// by subject and code, and that resources past MaxResources fold into
// OtherResource.
func TestCoordinatorMetrics(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	tmpl := &config.Template{Name: "db", Glob: "db*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: time.Minute, RefreshInterval: 10 * time.Second}
	c := coordtest.Start(t, nc, coordinator.Options{
		RoundInterval: coordinator.NoRoundInterval,
		Templates:     sources.StaticTemplates(config.NewSet(3, []*config.Template{tmpl}, nil)),
		Logger:        slog.New(slog.DiscardHandler),
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCoordinatorCollector(func() []metrics.Target { return []metrics.Target{c} }, metrics.Options{MaxResources: 2}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	url := srv.URL

	fams := scrape(t, url)
	if v, ok := value(fams, "allot_coordinator_leader", map[string]string{"node": "root"}); !ok || v != 1 {
		t.Fatalf("leader = %v, %v; want 1", v, ok)
	}
	if v, _ := value(fams, "allot_config_generation", map[string]string{"node": "root"}); v != 3 {
		t.Fatalf("config generation = %v; want 3", v)
	}

	granted := get(t, nc, "c1", "db", 30)
	if granted != 30 {
		t.Fatalf("granted %v; want 30", granted)
	}
	db := map[string]string{"node": "root", "resource": "db"}
	fams = waitFor(t, url, "outstanding of db is the lease granted", func(f map[string]*dto.MetricFamily) bool {
		v, _ := value(f, "allot_resource_outstanding", db)
		return v == granted
	})
	for name, want := range map[string]float64{"allot_resource_capacity": 100, "allot_resource_wants": 30, "allot_resource_claimants": 1, "allot_resource_learning": 0} {
		if v, ok := value(fams, name, db); !ok || v != want {
			t.Errorf("%s = %v (%v); want %v", name, v, ok, want)
		}
	}
	if v, _ := value(fams, "allot_coordinator_requests_total", map[string]string{"subject": "capacity.get"}); v != 1 {
		t.Errorf("requests of capacity.get = %v; want 1", v)
	}
	if v, _ := value(fams, "allot_coordinator_round_duration_seconds", map[string]string{"node": "root"}); v < 1 {
		t.Errorf("round histogram count = %v; want at least 1", v)
	}
	if _, ok := value(fams, "allot_coordinator_errors_total", nil); ok {
		t.Error("errors counted before any bad request")
	}

	// A malformed request (400, decoding) and an unmatched resource (404,
	// in a round) are counted with their codes.
	request(t, nc, "allot.root.capacity.get", []byte(`{"client_id":`))
	m := request(t, nc, "allot.root.capacity.get", []byte(`{"client_id":"c1","resource":[{"resource_id":"nope","wants":1}]}`))
	if got := m.Header.Get("Nats-Service-Error-Code"); got != "404" {
		t.Fatalf("unmatched resource: code %q; want 404", got)
	}
	request(t, nc, "allot.root.capacity.frob", []byte(`{}`))
	fams = scrape(t, url)
	for _, e := range []struct {
		subject, code string
	}{{"capacity.get", "400"}, {"capacity.get", "404"}, {"other", "404"}} {
		if v, _ := value(fams, "allot_coordinator_errors_total", map[string]string{"subject": e.subject, "code": e.code}); v != 1 {
			t.Errorf("errors of %s code %s = %v; want 1", e.subject, e.code, v)
		}
	}
	if v, _ := value(fams, "allot_coordinator_requests_total", map[string]string{"subject": "capacity.get"}); v != 3 {
		t.Errorf("requests of capacity.get = %v; want 3", v)
	}

	// Four resources, at most two by name: the two with the most
	// outstanding, the others summed.
	get(t, nc, "c1", "db2", 20)
	get(t, nc, "c1", "db3", 5)
	get(t, nc, "c1", "db4", 1)
	other := map[string]string{"node": "root", "resource": metrics.OtherResource}
	fams = waitFor(t, url, "two resources folded into "+metrics.OtherResource, func(f map[string]*dto.MetricFamily) bool {
		v, _ := value(f, "allot_coordinator_other_resources", map[string]string{"node": "root"})
		return v == 2
	})
	if v, _ := value(fams, "allot_resource_outstanding", other); v != 6 {
		t.Errorf("outstanding of %s = %v; want 6 (db3 5 + db4 1)", metrics.OtherResource, v)
	}
	if v, _ := value(fams, "allot_resource_claimants", other); v != 2 {
		t.Errorf("claimants of %s = %v; want 2", metrics.OtherResource, v)
	}
	for _, id := range []string{"db", "db2"} {
		if _, ok := value(fams, "allot_resource_outstanding", map[string]string{"resource": id}); !ok {
			t.Errorf("resource %s not reported by name", id)
		}
	}
	n := 0
	for _, m := range fams["allot_resource_outstanding"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" && !strings.HasPrefix(l.GetValue(), "db") && l.GetValue() != metrics.OtherResource {
				t.Errorf("unexpected resource label %q", l.GetValue())
			}
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d outstanding series; want 3 (two named and %s)", n, metrics.OtherResource)
	}

	// A release gives the capacity back; the idle resource is forgotten.
	request(t, nc, "allot.root.capacity.release", []byte(`{"client_id":"c1","resource_id":["db"]}`))
	fams = waitFor(t, url, "db no longer outstanding after the release", func(f map[string]*dto.MetricFamily) bool {
		// An idle resource without claimants is forgotten.
		v, ok := value(f, "allot_resource_outstanding", db)
		return !ok || v == 0
	})
	if v, _ := value(fams, "allot_coordinator_requests_total", map[string]string{"subject": "capacity.release"}); v != 1 {
		t.Errorf("requests of capacity.release = %v; want 1", v)
	}
}

// TestResourceShadowMetric: a resource whose template is shadow reports
// allot_resource_shadow 1, another 0; with Options.Shadow both are 1.
func TestResourceShadowMetric(t *testing.T) {
	for _, global := range []bool{false, true} {
		s := natstest.Server(t)
		nc := natstest.Conn(t, s)
		watched := &config.Template{Name: "watched", Glob: "watched", Capacity: 10, Algorithm: allotpb.Algorithm_FAIR_SHARE,
			LeaseLength: time.Minute, RefreshInterval: 10 * time.Second, Shadow: true}
		strict := &config.Template{Name: "strict", Glob: "strict", Capacity: 10, Algorithm: allotpb.Algorithm_FAIR_SHARE,
			LeaseLength: time.Minute, RefreshInterval: 10 * time.Second}
		c := coordtest.Start(t, nc, coordinator.Options{
			RoundInterval: coordinator.NoRoundInterval, Shadow: global,
			Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{watched, strict}, nil)),
			Logger:    slog.New(slog.DiscardHandler),
		})
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewCoordinatorCollector(func() []metrics.Target { return []metrics.Target{c} }, metrics.Options{MaxResources: 10}))
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		get(t, nc, "c1", "watched", 5)
		get(t, nc, "c1", "strict", 5)
		want := map[string]float64{"watched": 1, "strict": b2f(global)}
		waitFor(t, srv.URL, "shadow gauges of both resources", func(f map[string]*dto.MetricFamily) bool {
			for id, w := range want {
				if v, ok := value(f, "allot_resource_shadow", map[string]string{"node": "root", "resource": id}); !ok || v != w {
					return false
				}
			}
			return true
		})
		srv.Close()
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
