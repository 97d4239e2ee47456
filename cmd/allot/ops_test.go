package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"github.com/spf13/pflag"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/version"
	"github.com/allot/allot/metrics"
)

// opsURL is the base URL of the metrics and health endpoints that up
// printed.
func (u *upRun) opsURL(t *testing.T) string {
	t.Helper()
	return u.printed(t, regexp.MustCompile(`metrics at (http://127\.0\.0\.1:\d+)/metrics`), "the metrics URL")[1]
}

// printed waits until up's output matches re and returns the match: the
// lines after "allot is up" may still be on their way when startUp returns.
func (u *upRun) printed(t *testing.T, re *regexp.Regexp, what string) []string {
	t.Helper()
	var m []string
	poll.For(t, 10*time.Second, poll.Interval, func() error {
		if m = re.FindStringSubmatch(u.out.String()); m == nil {
			return fmt.Errorf("up did not print %s:\n%s", what, u.out.String())
		}
		return nil
	})
	return m
}

// httpGet returns the status code and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers with code, for at most 15s.
func waitStatus(t *testing.T, url string, code int) string {
	t.Helper()
	var body string
	poll.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		var got int
		if got, body = httpGet(t, url); got != code {
			return fmt.Errorf("GET %s: %d %s; want %d", url, got, body, code)
		}
		return nil
	})
	return body
}

// scrapeMetrics fetches url/metrics and parses it with the Prometheus
// text parser.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, url+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// metricValue is the value of the sample of family name whose labels
// include want; ok is false if there is none.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, ok bool) {
	for _, m := range fams[name].GetMetric() {
		if labelsInclude(m, want) {
			return sampleValue(m), true
		}
	}
	return 0, false
}

// TestUpServesMetrics: `allot up` prints where it serves metrics and
// health; after a get, /metrics (parsed with the Prometheus text parser)
// shows the lease outstanding and the request counted, and /healthz and
// /readyz answer 200.
func TestUpServesMetrics(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0", "--metrics-max-resources", "1")
	base := up.opsURL(t)
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	waitStatus(t, base+"/readyz", http.StatusOK)

	if code, out := runCtx(context.Background(), "get", "--nats", up.url, "mysql/main", "--wants", "7", "--client", "c1"); code != 0 {
		t.Fatalf("get: %d %s", code, out)
	}
	res := map[string]string{"node": "root", "resource": "mysql/main"}
	var fams map[string]*dto.MetricFamily
	poll.For(t, 10*time.Second, 100*time.Millisecond, func() error {
		fams = scrapeMetrics(t, base)
		if out, _ := metricValue(fams, "allot_resource_outstanding", res); out != 7 {
			return fmt.Errorf("outstanding of mysql/main is %v; want 7", out)
		}
		return nil
	})
	for name, want := range map[string]float64{"allot_resource_capacity": 500, "allot_resource_wants": 7, "allot_resource_claimants": 1} {
		if v, ok := metricValue(fams, name, res); !ok || v != want {
			t.Errorf("%s = %v (%v); want %v", name, v, ok, want)
		}
	}
	if v, _ := metricValue(fams, "allot_coordinator_requests_total", map[string]string{"subject": "capacity.get"}); v < 1 {
		t.Errorf("capacity.get requests = %v", v)
	}
	if v, _ := metricValue(fams, "allot_coordinator_leader", map[string]string{"node": "root"}); v != 1 {
		t.Errorf("leader = %v; want 1", v)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
	if v, _ := metricValue(fams, "allot_config_rejected_puts_total", map[string]string{"node": "root"}); v != 0 {
		t.Errorf("rejected puts = %v before any", v)
	}

	// Past --metrics-max-resources, resources are summed as _other.
	if code, out := runCtx(context.Background(), "get", "--nats", up.url, "db", "--wants", "3", "--client", "c1"); code != 0 {
		t.Fatalf("get: %d %s", code, out)
	}
	other := map[string]string{"node": "root", "resource": metrics.OtherResource}
	poll.For(t, 10*time.Second, 100*time.Millisecond, func() error {
		fams := scrapeMetrics(t, base)
		n, _ := metricValue(fams, "allot_coordinator_other_resources", map[string]string{"node": "root"})
		if v, _ := metricValue(fams, "allot_resource_outstanding", other); n != 1 || v != 3 {
			return fmt.Errorf("db not summed as %s:\n%v", metrics.OtherResource, fams["allot_resource_outstanding"])
		}
		return nil
	})

	// A broken template put is counted.
	nc, err := nats.Connect(up.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, configkv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "templates.mysql-main", []byte("identifier_glob: mysql/main\ncapacity: [")); err != nil {
		t.Fatal(err)
	}
	poll.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if v, _ := metricValue(scrapeMetrics(t, base), "allot_config_rejected_puts_total", map[string]string{"node": "root"}); v != 1 {
			return fmt.Errorf("rejected puts = %v after a broken put; want 1", v)
		}
		return nil
	})
	up.wait(t)
}

// TestCoordinatorReadyz: `allot coordinator --metrics-addr` logs JSON
// under --log-format json; /readyz turns 200 once its replica leads, and
// 503 naming the cause once NATS is gone, while /healthz stays 200. With
// lease partitions the cause names each partition's replica (they share
// a server id).
func TestCoordinatorReadyz(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		says []string
	}{
		{"one partition", nil, []string{"replica r0 of node root: not connected to NATS"}},
		{"lease partitions", []string{"--lease-partitions", "2"}, []string{
			"replica r0 of node root, lease partition 0 of 2: not connected to NATS",
			"replica r0 of node root, lease partition 1 of 2: not connected to NATS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			ctx, cancel := context.WithCancel(context.Background())
			out := &syncBuffer{}
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, testEnv(out), append([]string{"coordinator", "--nats", s.ClientURL(), "--metrics-addr", "127.0.0.1:0",
					"--log-format", "json", "--server-id", "r0", "--election-ttl", "1s"}, tc.args...))
			}()
			defer func() {
				cancel()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Error("coordinator did not stop")
				}
			}()
			var base string
			poll.For(t, 15*time.Second, 20*time.Millisecond, func() error {
				for _, line := range strings.Split(out.String(), "\n") {
					var rec map[string]any
					if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "serving metrics and health" {
						base = strings.TrimSuffix(rec["metrics"].(string), "/metrics")
						return nil
					}
				}
				return fmt.Errorf("no JSON log line with the metrics URL:\n%s", out.String())
			})
			waitStatus(t, base+"/readyz", http.StatusOK)
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if !json.Valid([]byte(line)) {
					t.Errorf("log line is not JSON: %s", line)
				}
			}

			s.Shutdown()
			s.WaitForShutdown()
			// Each partition's replica notices the lost connection on its
			// own: wait until the reason names every one.
			poll.For(t, 15*time.Second, 50*time.Millisecond, func() error {
				code, body := httpGet(t, base+"/readyz")
				for _, want := range tc.says {
					if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
						return fmt.Errorf("/readyz without NATS: %d %q, want 503 with %q in it", code, body, want)
					}
				}
				return nil
			})
			if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
				t.Errorf("/healthz without NATS: %d", code)
			}
		})
	}
}

// TestVersionAndOpsFlags: `allot version` prints the version the services
// report in their micro INFO, and bad --log-format and --metrics-max-resources
// values are refused, naming the flag.
func TestVersionAndOpsFlags(t *testing.T) {
	code, out := runCtx(context.Background(), "version")
	if code != 0 || !regexp.MustCompile(`^allot `+regexp.QuoteMeta(version.Version)+` \((commit [0-9a-f]{12}, )?go1\.\d+`).MatchString(out) {
		t.Fatalf("version: %d %q", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"coordinator", "--nats", "nats://127.0.0.1:1", "--log-format", "xml"}, `--log-format "xml"`},
		{[]string{"coordinator", "--nats", "nats://127.0.0.1:1", "--metrics-max-resources", "101"}, "--metrics-max-resources 101"},
		{[]string{"up", "--data-dir", t.TempDir(), "--metrics-max-resources", "0"}, "--metrics-max-resources 0"},
	} {
		if code, out := runCtx(context.Background(), tc.args...); code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%q: code %d, %s; want an error with %q", tc.args, code, out, tc.want)
		}
	}
}

// TestKubernetesManifestMatchesBinary: the coordinator manifest's args are
// flags `allot coordinator` accepts, and its probes and scrape annotation
// name paths the ops mux serves on the port --metrics-addr gives.
func TestKubernetesManifestMatchesBinary(t *testing.T) {
	data, err := os.ReadFile("../../deploy/kubernetes/coordinator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec struct {
					Containers []struct {
						Args  []string `json:"args"`
						Ports []struct {
							Name          string `json:"name"`
							ContainerPort int    `json:"containerPort"`
						} `json:"ports"`
						Liveness  probe `json:"livenessProbe"`
						Readiness probe `json:"readinessProbe"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	fs := pflag.NewFlagSet("coordinator", pflag.ContinueOnError)
	var cf coordFlags
	cf.register(fs)
	var conn connFlags
	conn.register(fs)
	if len(c.Args) == 0 || c.Args[0] != "coordinator" {
		t.Fatalf("args %q", c.Args)
	}
	if err := fs.Parse(c.Args[1:]); err != nil {
		t.Fatalf("args %q: %v", c.Args, err)
	}
	if _, err := cf.logger(testEnv(io.Discard)); err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(cf.metricsAddr)
	if err != nil || len(c.Ports) != 1 || strconv.Itoa(c.Ports[0].ContainerPort) != port || d.Spec.Template.Metadata.Annotations["prometheus.io/port"] != port {
		t.Fatalf("--metrics-addr %q, ports %+v, annotations %v", cf.metricsAddr, c.Ports, d.Spec.Template.Metadata.Annotations)
	}
	mux := opsMux(prometheus.NewRegistry(), func() error { return nil })
	scrape := probe{HTTPGet: httpGetProbe{Path: d.Spec.Template.Metadata.Annotations["prometheus.io/path"], Port: c.Ports[0].Name}}
	for _, p := range []probe{c.Liveness, c.Readiness, scrape} {
		if p.HTTPGet.Port != c.Ports[0].Name {
			t.Errorf("probe on port %q; want %q", p.HTTPGet.Port, c.Ports[0].Name)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.HTTPGet.Path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d", p.HTTPGet.Path, rec.Code)
		}
	}
}

// probe is a Kubernetes HTTP probe.
type probe struct {
	HTTPGet httpGetProbe `json:"httpGet"`
}

type httpGetProbe struct {
	Path string `json:"path"`
	Port string `json:"port"`
}

// TestUpReplicasReady: with a leader and a follower in one process, both
// replicas are reported, exactly one leads, and /readyz is 200 (a follower
// of a known leader is ready).
func TestUpReplicasReady(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0", "--replicas", "2")
	base := up.opsURL(t)
	// Each replica registers with the ops endpoints once its templates
	// are loaded, on its own goroutine: the leader may be up (and /readyz
	// 200 for it alone) before the follower is registered. Wait for both,
	// then for /readyz to be 200 with both.
	poll.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		if n := len(scrapeMetrics(t, base)["allot_coordinator_leader"].GetMetric()); n != 2 {
			return fmt.Errorf("%d replicas reported; want 2", n)
		}
		return nil
	})
	waitStatus(t, base+"/readyz", http.StatusOK)
	fams := scrapeMetrics(t, base)
	leaders, n := 0.0, 0
	for _, s := range fams["allot_coordinator_leader"].GetMetric() {
		leaders += s.GetGauge().GetValue()
		n++
	}
	if n != 2 || leaders != 1 {
		t.Fatalf("%d replicas reported, %v leading; want 2 and 1", n, leaders)
	}
	if got := len(fams["allot_coordinator_rounds_total"].GetMetric()); got != 1 {
		t.Fatalf("rounds reported %d times; want once, by the leader", got)
	}
	up.wait(t)
}

// TestUpMetricsPortBusy: when the default metrics port is taken, `allot
// up` picks a free one and prints it; an explicit busy --metrics-addr is
// an error naming the flag.
func TestUpMetricsPortBusy(t *testing.T) {
	// The test holds a port of its own and makes it up's default: the
	// real default (127.0.0.1:9464) may be held, and let go at any moment,
	// by any other process on the host, such as an `allot up` a developer
	// left running or the same test in another run beside this one.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().String()
	up := startUpEnv(t, busy, "--data-dir", t.TempDir())
	base := up.opsURL(t)
	if base == "http://"+busy {
		t.Fatalf("up reports the busy default port: %s", base)
	}
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz on the fallback port: %d %s", code, body)
	}
	up.wait(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, out := runCtx(ctx, "up", "--port", "0", "--data-dir", t.TempDir(), "--metrics-addr", busy)
	if code == 0 || !strings.Contains(out, "--metrics-addr "+busy) {
		t.Fatalf("up on a busy --metrics-addr: %d %s", code, out)
	}
}
