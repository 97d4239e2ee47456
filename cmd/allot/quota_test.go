package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/quotaserver"
)

// quotaTake asks subject until some partition answers (partitions elect
// their leaders after `allot up` reports it is up) and returns the reply.
func quotaTake(t *testing.T, nc *nats.Conn, subject, body string) map[string]any {
	t.Helper()
	return quotaTakeUntil(t, nc, subject, body, func(map[string]any) bool { return true })
}

// quotaTakeUntil asks subject until the reply satisfies ok (e.g. a
// configuration just put is in force) and returns it. A partition not
// serving yet is no responders at once; a serving one must answer, and
// may take over a second to under -race on a loaded machine: a take
// retried after it was decided would be taken twice.
func quotaTakeUntil(t *testing.T, nc *nats.Conn, subject, body string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	r, _ := quotaTakeUntilN(t, nc, subject, body, ok)
	return r
}

// quotaTakeUntilN is quotaTakeUntil that also says how many answers ok
// refused on the way (each counted by the service as decided).
func quotaTakeUntilN(t *testing.T, nc *nats.Conn, subject, body string, ok func(map[string]any) bool) (map[string]any, int) {
	t.Helper()
	var r map[string]any
	refused := 0
	poll.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		m, err := nc.Request(subject, []byte(body), 5*time.Second)
		if err != nil {
			return fmt.Errorf("take %s %s: %w", subject, body, err)
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("take %s %s: error %s: %s", subject, body, code, m.Header.Get("Nats-Service-Error"))
		}
		r = nil
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("take reply %s: %v", m.Data, err)
		}
		if !ok(r) {
			refused++
			return fmt.Errorf("take %s %s: no satisfying answer (last %v)", subject, body, r)
		}
		return nil
	})
	return r, refused
}

// TestUpServesQuotaPartitions: `allot up --quota-partitions 2` maps the
// bucket subjects to two partitions on its embedded server and both elect
// a leader; a namespace put with `allot config put` is then answered as
// configured on the plain and the bucket subjects, and `allot status`
// lists both partitions with their leader and term.
func TestUpServesQuotaPartitions(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--quota-partitions", "2")
	up.printed(t, regexp.MustCompile(regexp.QuoteMeta("2 partition(s)")), "the quota partitions")
	nc, err := nats.Connect(up.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	namespaces := []string{"a", "b", "c", "d", "e", "f"}
	for _, ns := range namespaces {
		r := quotaTake(t, nc, quotaserver.BucketSubject("root", "take", ns, "k"), `{}`)
		if r["status"] != "REJECTED" || r["reason"] != "no_bucket" {
			t.Fatalf("take %s:k with no namespaces configured: %v, want REJECTED no_bucket", ns, r)
		}
	}
	for _, ns := range namespaces {
		if code, out, errs := runCLI(t, `{"buckets": {"k": {"size": 2, "fill_rate": 0.01, "wait_timeout": "0s"}}}`,
			"config", "put", "--nats", up.url, "namespaces."+ns, "-"); code != 0 {
			t.Fatalf("config put namespaces.%s: exit %d: %s%s", ns, code, out, errs)
		}
	}
	// A take asked before its namespace is applied is refused no_bucket
	// and asked again: those count among the refusals below.
	early := 0
	for _, ns := range namespaces {
		var got []any
		for _, subject := range []string{quotaserver.TakeSubject("root"), quotaserver.BucketSubject("root", "take", ns, "k"), quotaserver.TakeSubject("root")} {
			r, n := quotaTakeUntilN(t, nc, subject, `{"bucket":"`+ns+`:k"}`, func(r map[string]any) bool { return r["reason"] != "no_bucket" })
			early += n
			got = append(got, r["status"])
		}
		if fmt.Sprint(got) != "[OK OK REJECTED]" {
			t.Fatalf("three takes of %s:k (size 2): %v, want OK, OK, REJECTED", ns, got)
		}
	}
	out := statusUntil(t, func(code int, out string) string {
		if code != 0 {
			return fmt.Sprintf("status exit %d: %s", code, out)
		}
		quotaPart, _, _ := strings.Cut(out, "DOMAIN LIMITS")
		rows := regexp.MustCompile(`(?m)^root\s+([01])\s+\S+\s+\d+\s`).FindAllStringSubmatch(quotaPart, -1)
		if !strings.Contains(out, "QUOTA") || len(rows) != 2 {
			return "status does not list both quota partitions with a leader and term:\n" + out
		}
		return ""
	}, "--nats", up.url)
	t.Logf("\n%s", out)
	// So do the metrics, per partition and namespace: the first six takes
	// (no namespace yet) refused under the default namespace, and in each
	// of the six two takes served and one refused (no wait allowed).
	fams := scrapeMetrics(t, up.opsURL(t))
	served := metricSum(fams, "allot_quota_served_total", nil)
	missed := metricSum(fams, "allot_quota_rejected_total", map[string]string{"namespace": "_default", "reason": "no_bucket"})
	if served != 12 || missed != float64(6+early) {
		t.Errorf("metrics: %v takes served and %v refused for want of a namespace, want 12 and %d", served, missed, 6+early)
	}
	for _, ns := range namespaces {
		if n := metricSum(fams, "allot_quota_rejected_total", map[string]string{"namespace": ns, "reason": "no_wait"}); n != 1 {
			t.Errorf("metrics: %v takes of namespace %s refused no_wait, want 1", n, ns)
		}
	}
	up.wait(t)
}

// metricSum is the sum of the samples of family name whose labels
// include want.
func metricSum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	sum := 0.0
	for _, m := range fams[name].GetMetric() {
		if labelsInclude(m, want) {
			sum += sampleValue(m)
		}
	}
	return sum
}

// labelsInclude reports whether m's labels include want.
func labelsInclude(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for name, w := range want {
		if v, in := have[name]; !in || v != w {
			return false
		}
	}
	return true
}

// sampleValue is m's value, whatever its type.
func sampleValue(m *dto.Metric) float64 {
	return m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
}

func TestQuotaFlagsInvalid(t *testing.T) {
	for _, args := range [][]string{
		{"--quota-partitions", "0"},
		{"--quota-partitions", "2", "--quota-serve", "2"},
		{"--quota-serve", "x"},
		{"--quota-serve", "-1"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code, out := runCtx(ctx, append([]string{"coordinator", "--nats", "nats://127.0.0.1:1"}, args...)...)
		cancel()
		if code == 0 || !strings.Contains(out, "quota") {
			t.Errorf("coordinator %v: exit %d, %s; want an error naming the quota flag", args, code, out)
		}
	}
}

// TestCoordinatorServesSomePartitions: `allot up` serves quota partition 0
// of 2 only, and an `allot coordinator --quota-serve 1` joining the same
// deployment leads partition 1, so namespaces of both are answered, and
// each partition's leader is the process that serves it.
func TestCoordinatorServesSomePartitions(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--quota-partitions", "2", "--quota-serve", "0", "--server-id", "up")
	startCoordinator(t, []string{"--nats", up.url, "--server-id", "joined", "--quota-partitions", "2", "--quota-serve", "1"}, []string{"--nats", up.url})
	nc, err := nats.Connect(up.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, ns := range []string{"a", "b", "c", "d"} {
		if r := quotaTake(t, nc, quotaserver.TakeSubject("root"), `{"bucket":"`+ns+`:k"}`); r["status"] != "REJECTED" {
			t.Fatalf("take %s:k: %v", ns, r)
		}
	}
	statusUntil(t, func(code int, out string) string {
		p0 := regexp.MustCompile(`(?m)^root\s+0\s+up\s`).MatchString(out)
		p1 := regexp.MustCompile(`(?m)^root\s+1\s+joined\s`).MatchString(out)
		if code != 0 || !p0 || !p1 {
			return fmt.Sprintf("status (exit %d) does not show partition 0 led by up and 1 by joined:\n%s", code, out)
		}
		return ""
	}, "--nats", up.url)
}
