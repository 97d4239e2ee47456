package rls_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/internal/poll"
)

// startProcess runs bin with args until the test ends and returns the
// first match of re in its output.
func startProcess(t *testing.T, name, bin string, re *regexp.Regexp, args ...string) []string {
	t.Helper()
	out, _ := faults.RunProcess(t, name, bin, os.Interrupt, 15*time.Second, args...)
	var m []string
	poll.Until(t, 60*time.Second, name+" to start", func() bool {
		m = re.FindStringSubmatch(faults.ReadOutput(out))
		return m != nil
	})
	return m
}

func dialRLS(t *testing.T, addr string) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// TestProcessesReplayReference runs `allot up --rls-addr` and, beside it,
// `allot agent --rls-addr` as separate processes, stores the reference's
// configuration files with the KV API (as `nats kv put` does), and sends
// every recorded request of the reference's default profile to each over
// real gRPC, at the wall clock's instants. Each reply must equal what a
// Limiter (the decision core, itself equal to the reference's recorded
// replies) answers at the same second: the same configuration files give
// the reference's decisions across processes, through the partitions and
// through the sidecar.
func TestProcessesReplayReference(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/allot and runs it in separate processes")
	}
	bin := faults.BuildAllot(t)
	up := startProcess(t, "up", bin, regexp.MustCompile(`envoy rate limit service \(gRPC[^)]*\) at (\S+)(?s:.*)allot is up: NATS at (nats://\S+),`),
		"up", "--port", "0", "--data-dir", t.TempDir(), "--metrics-addr", "", "--quota-partitions", "2", "--log-level", "warn", "--election-ttl", "10s",
		"--rls-addr", "127.0.0.1:0", "--rls-headers", "x-ratelimit")
	upRLS, url := up[1], up[2]
	agent := startProcess(t, "agent", bin, regexp.MustCompile(`envoy rate limit service \(gRPC[^)]*\) at (\S+)`),
		"agent", "--nats", url, "--rls-addr", "127.0.0.1:0", "--rls-headers", "x-ratelimit", "--log-level", "warn")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), "allot_config")
	if err != nil {
		t.Fatal(err)
	}
	rec := loadRecording(t)
	for _, target := range []struct{ name, addr string }{{"allot up", upRLS}, {"allot agent", agent[1]}} {
		t.Run(target.name, func(t *testing.T) {
			client := dialRLS(t, target.addr)
			for i, sc := range rec.Scenarios {
				if sc.Profile != "default" {
					continue // the processes run the default profile's settings
				}
				for attempt := 0; ; attempt++ {
					rename := suffix(fmt.Sprintf("_%s_%d_%d", map[bool]string{true: "up", false: "agent"}[target.addr == upRLS], i, attempt))
					if replayLive(t, client, kv, sc, rename) {
						break
					}
					if attempt == 2 {
						t.Fatalf("%s: a request straddled a second three times", sc.Name)
					}
				}
			}
		})
	}
}

// replayLive sends sc's requests to client on domains renamed by rename
// and compares each reply with a Limiter's at the same second. It returns
// false when a request was sent and answered in different seconds (its
// second is then unknown): the caller runs the scenario again on fresh
// domains.
func replayLive(t *testing.T, client rlspb.RateLimitServiceClient, kv jetstream.KeyValue, sc recordedScenario, rename func(string) string) bool {
	t.Helper()
	names := putDomains(t, kv, rename)
	var domains []envoyrl.Domain
	for _, n := range names {
		e, err := kv.Get(context.Background(), config.EnvoyKey(n))
		if err != nil {
			t.Fatal(err)
		}
		d, err := config.ParseEnvoy(n, 0, e.Value())
		if err != nil {
			t.Fatal(err)
		}
		domains = append(domains, d.Domain)
	}
	cfg, err := envoyrl.NewConfig(domains, envoyrl.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mirror := envoyrl.NewLimiter(cfg, &envoyrl.MemoryStore{}, profiles["default"].opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The process has loaded the domains once a limit override on each
	// (with no hits) is answered with its limit.
	poll.Until(t, 20*time.Second, "the domains to load", func() bool {
		for _, n := range names {
			probe := &rlspb.RateLimitRequest{Domain: n, Descriptors: []*rlv3.RateLimitDescriptor{{
				Entries:    []*rlv3.RateLimitDescriptor_Entry{{Key: "allot_probe", Value: "1"}},
				Limit:      &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND},
				HitsAddend: wrapperspb.UInt64(0),
			}}}
			resp, err := client.ShouldRateLimit(ctx, probe)
			if err != nil || resp.GetStatuses()[0].GetCurrentLimit() == nil {
				return false
			}
		}
		return true
	})
	var prev int64
	for j, st := range steps(t, sc, rename) {
		now := time.Now()
		if j > 0 && st.Unix > prev || now.Sub(now.Truncate(time.Second)) > 800*time.Millisecond {
			// A later second in the recording, or too close to the next
			// one to be sure of this one: start a fresh second.
			time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
		}
		prev = st.Unix
		t0 := time.Now()
		got, err := client.ShouldRateLimit(ctx, st.req)
		t1 := time.Now()
		if t0.Unix() != t1.Unix() {
			return false
		}
		want, wantErr := mirror.ShouldRateLimit(ctx, time.Unix(t0.Unix(), 0), st.req)
		what := label(sc, j, st)
		switch {
		case wantErr != nil && err == nil:
			t.Errorf("%s: the Limiter failed (%v), the process answered %v", what, wantErr, got)
		case wantErr == nil && err != nil:
			t.Errorf("%s: error %v, the Limiter answered %v", what, err, want)
		case wantErr == nil && !proto.Equal(want, got):
			t.Errorf("%s:\n got  %s\n want %s", what, protojson.Format(got), protojson.Format(want))
		}
	}
	return true
}

// TestSidecarProcess: `allot agent` in its own process answers a
// descriptor a template maps to a lease from its lease: once it holds
// the lease, its answers send nothing to the partitions (their micro
// STATS do not move), and they refuse what the lease does not cover. Its
// allow endpoint answers from the same agent.
func TestSidecarProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/allot and runs it in separate processes")
	}
	bin := faults.BuildAllot(t)
	up := startProcess(t, "up", bin, regexp.MustCompile(`allot is up: NATS at (nats://\S+),`),
		"up", "--port", "0", "--data-dir", t.TempDir(), "--metrics-addr", "", "--log-level", "warn")
	nc, err := nats.Connect(up[1])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "allot_config")
	if err != nil {
		t.Fatal(err)
	}
	// Leases of a minute: one that lapsed while the machine was slow
	// would send the requests below to the partition.
	for key, doc := range map[string]string{
		config.Key("edge-api"):  `{"identifier_glob":"envoy/edge/path=/api/*","capacity":5,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"500ms"}}`,
		config.Key("db"):        `{"identifier_glob":"db","capacity":3,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"500ms"}}`,
		config.EnvoyKey("edge"): "domain: edge\ndescriptors:\n  - key: path\n    value: /api/*\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1000}\n",
	} {
		if _, err := kv.Put(ctx, key, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	agent := startProcess(t, "agent", bin, regexp.MustCompile(`(?s)envoy rate limit service \(gRPC[^)]*\) at (\S+).*allow endpoint at (http://\S+)\?`),
		"agent", "--nats", up[1], "--rls-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-level", "warn")
	client := dialRLS(t, agent[1])
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/api/items"}}}}}
	partitionRequests := func() float64 {
		m, err := nc.Request("$SRV.STATS.allot-envoy", nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st, ok := opstatus.DecodeStats(m.Data, func(s *envoyserver.Stats) bool { return s.Node != "" })
		if !ok {
			t.Fatalf("envoy partition stats without a partition's data: %s", m.Data)
		}
		return float64(st.Requests)
	}
	// Until its first lease the sidecar counts in the partition; then a
	// refusal shows the lease (5 per second) in force.
	poll.Until(t, 30*time.Second, "the sidecar to answer from its lease", func() bool {
		resp, err := client.ShouldRateLimit(ctx, req)
		return err == nil && resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT
	})
	before := partitionRequests()
	codes := map[rlspb.RateLimitResponse_Code]int{}
	for range 50 {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		codes[resp.GetOverallCode()]++
	}
	if after := partitionRequests(); after != before {
		t.Errorf("%g count requests reached the partition while the sidecar held the lease", after-before)
	}
	if codes[rlspb.RateLimitResponse_OVER_LIMIT] == 0 {
		t.Errorf("50 requests at once on a lease of 5 per second: %v", codes)
	}

	// The allow endpoint: the first request waits for db's lease (as
	// long as the endpoint lets it: a loaded machine is slow to answer).
	resp, err := http.Get(agent[2] + "?resource=db&wait=10s")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"allowed":true`) {
		t.Fatalf("allow: %d %s", resp.StatusCode, body)
	}
}
