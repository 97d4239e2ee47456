package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot/allot/internal/poll"
)

const edgeDomain = `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 50, name: api}
`

var rlsAddr = regexp.MustCompile(`envoy rate limit service \(gRPC[^)]*\) at (\S+)`)

// rlsClient dials the RateLimitService `allot up` announced in out.
func rlsClient(t *testing.T, out string) rlspb.RateLimitServiceClient {
	t.Helper()
	m := rlsAddr.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no RLS address in %s", out)
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

func descriptor(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestUpEnvoyConfig is an operator's path: `allot up --rls-addr`, an
// Envoy domain stored with `allot config put envoy.edge`, decisions over
// gRPC as configured, a hot reload, an invalid put refused by the CLI and,
// written with `nats kv put`, kept out while the last valid revision
// serves; `allot config list`, `explain` and `validate` show it.
func TestUpEnvoyConfig(t *testing.T) {
	up := startUp(t, "--data-dir", t.TempDir(), "--quota-partitions", "2", "--rls-addr", "127.0.0.1:0", "--rls-headers", "x-ratelimit")
	if code, out, errs := runCLI(t, edgeDomain, "config", "put", "--nats", up.url, "envoy.edge", "-"); code != 0 || !strings.Contains(out, "Envoy domain: 2 descriptors, 2 limits") {
		t.Fatalf("config put: exit %d: %s%s", code, out, errs)
	}
	client := rlsClient(t, up.out.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask := func(d *rlv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The domain loads and the partitions elect their leaders after `up`
	// says it is up: ask a key nobody else uses until it is limited.
	poll.Until(t, 20*time.Second, "domain edge served", func() bool {
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("client", "probe")}})
		return err == nil && resp.GetStatuses()[0].GetCurrentLimit() != nil
	})
	codes := []rlspb.RateLimitResponse_Code{}
	for range 3 {
		codes = append(codes, ask(descriptor("client", "alice")).GetOverallCode())
	}
	if codes[0] != rlspb.RateLimitResponse_OK || codes[1] != rlspb.RateLimitResponse_OK || codes[2] != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("alice: %v, want OK OK OVER_LIMIT", codes)
	}
	if resp := ask(descriptor("client", "bob")); len(resp.GetResponseHeadersToAdd()) != 3 || resp.GetResponseHeadersToAdd()[0].GetKey() != "x-ratelimit-limit" {
		t.Errorf("headers: %v", resp.GetResponseHeadersToAdd())
	}
	// The counter partitions' metrics: alice's and bob's hits (and the
	// probes'), counted in this process's partitions.
	fams := scrapeMetrics(t, up.opsURL(t))
	if hits, local := metricSum(fams, "allot_envoy_hits_total", nil), metricSum(fams, "allot_envoy_count_local_total", nil); hits < 4 || local < 4 {
		t.Errorf("metrics: %v hits in %v local count requests, want at least 4 of each", hits, local)
	}
	if n := len(fams["allot_envoy_counters"].GetMetric()); n != 2 {
		t.Errorf("allot_envoy_counters has %d series, want one per partition (2)", n)
	}

	// A hot reload: 5 a minute now.
	code, out, errs := runCLI(t, strings.Replace(edgeDomain, "requests_per_unit: 2", "requests_per_unit: 5", 1), "config", "put", "--nats", up.url, "envoy.edge", "-")
	rev := regexp.MustCompile(`stored envoy.edge revision (\d+)`).FindStringSubmatch(out)
	if code != 0 || rev == nil {
		t.Fatalf("config put: exit %d: %s%s", code, out, errs)
	}
	serving := rev[1]
	poll.Until(t, 10*time.Second, "the reload", func() bool {
		return ask(descriptor("client", "reload")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 5
	})

	// The CLI refuses an invalid domain and stores nothing.
	bad := strings.Replace(edgeDomain, "unit: minute", "unit: fortnight", 1)
	if code, _, errs := runCLI(t, bad, "config", "put", "--nats", up.url, "envoy.edge", "-"); code == 0 || !strings.Contains(errs, `invalid rate limit unit "fortnight"`) {
		t.Fatalf("invalid put: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, edgeDomain, "config", "put", "--nats", up.url, "envoy.other", "-"); code == 0 || !strings.Contains(errs, "store it under envoy.edge") {
		t.Fatalf("put under another domain's key: exit %d: %s", code, errs)
	}
	// Written unchecked, it is rejected and revision 2 keeps serving.
	nc, err := nats.Connect(up.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, "allot_config")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "envoy.edge", []byte(bad)); err != nil {
		t.Fatal(err)
	}
	_, out, _ = runCLI(t, "", "config", "list", "--nats", up.url)
	if !regexp.MustCompile(`envoy\.edge\s+\d+\s+2 descriptors, 2 limits\s+INVALID: .*fortnight.*; revision ` + serving + ` serves`).MatchString(out) {
		t.Errorf("config list:\n%s", out)
	}
	if got := ask(descriptor("client", "after-bad-put")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != 5 {
		t.Errorf("after an invalid put the limit is %d, want 5 (the last valid revision)", got)
	}

	// Explain: the tree, and what a descriptor gets; a template that
	// names /api/* maps it to leases.
	tmpl := `{"identifier_glob":"envoy/edge/path=/api/*","capacity":50,"algorithm":{"kind":"FAIR_SHARE","lease_length":"10s","refresh_interval":"1s"}}`
	if code, out, errs := runCLI(t, tmpl, "config", "put", "--nats", up.url, "envoy-api", "-"); code != 0 {
		t.Fatalf("template put: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "", "config", "explain", "--nats", up.url, "envoy.edge", "path=/api/v1", "x=1")
	if code != 0 {
		t.Fatalf("explain: exit %d: %s%s", code, out, errs)
	}
	for _, want := range []string{
		"is INVALID", "serve revision " + serving + ", the last valid one",
		"client", "5 per minute", "counted centrally (no template maps envoy/edge/client=<value>)",
		"path=/api/*", "50 per second", "name api, share_threshold", "leases of envoy/edge/path=/api/* (template envoy-api: FAIR_SHARE, capacity 50 per second)",
		"Descriptor path=/api/v1, x=1:", "no limit applies",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runCLI(t, "", "config", "explain", "--nats", up.url, "envoy.edge", "path=/api/v1")
	for _, want := range []string{"limit: 50 per second (name api)", `counter: edge_path_/api/*_<window start>, in the partition of token "edge"`, "sidecar: leases of envoy/edge/path=/api/*"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	// validate knows the reference's files, and says how to check one.
	if code, _, errs := runCLI(t, edgeDomain, "config", "validate", "--name", "envoy.edge", "-"); code != 0 || !strings.Contains(errs, "is valid") {
		t.Errorf("validate: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, edgeDomain, "config", "validate", "-"); code == 0 || !strings.Contains(errs, "check it with --name envoy.edge") {
		t.Errorf("validate without a name: exit %d: %s", code, errs)
	}
}
