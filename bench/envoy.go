package bench

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// EnvoyOptions configure the Envoy benchmark. Zero fields take the
// defaults of DefaultEnvoyOptions.
type EnvoyOptions struct {
	// Duration is the measured time per target, split over Phases;
	// Warmup runs before each phase.
	Duration time.Duration `json:"duration_ns"`
	Warmup   time.Duration `json:"warmup_ns"`
	Phases   int           `json:"phases"`
	// InFlight is how many ShouldRateLimit calls are in flight at once,
	// over Conns gRPC connections.
	InFlight int `json:"in_flight"`
	Conns    int `json:"conns"`
	// Keys is how many distinct descriptor values the requests cycle
	// through (one counter each per window).
	Keys int `json:"keys"`
	// NoReference skips envoyproxy/ratelimit.
	NoReference bool `json:"no_reference"`
}

// DefaultEnvoyOptions are the options of a full run; short runs shorten
// Duration and Warmup. 64 in flight is where the reference was measured.
func DefaultEnvoyOptions(short bool) EnvoyOptions {
	o := EnvoyOptions{Duration: 20 * time.Second, Warmup: 2 * time.Second, Phases: 2, InFlight: 64, Conns: 4, Keys: 1000}
	if short {
		o.Duration, o.Warmup = 8*time.Second, time.Second
	}
	return o
}

func (o *EnvoyOptions) fill(short bool) {
	d := DefaultEnvoyOptions(short)
	orDefault(&o.Duration, d.Duration)
	orDefault(&o.Warmup, d.Warmup)
	orDefault(&o.Phases, d.Phases)
	orDefault(&o.InFlight, d.InFlight)
	orDefault(&o.Conns, d.Conns)
	orDefault(&o.Keys, d.Keys)
}

// EnvoyTarget is what one server achieved.
type EnvoyTarget struct {
	Name string `json:"name"`
	// CPUOf names the processes whose CPU is counted.
	CPUOf     string  `json:"cpu_of"`
	Decisions int64   `json:"decisions"`
	OverLimit int64   `json:"over_limit"`
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	RPS       float64 `json:"decisions_per_second"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	// CPUSeconds is the counted processes' CPU (user+system) while
	// measured; CPUPerDecisionUs divides it by the decisions, and
	// DecisionsPerCPUSecond is its inverse.
	CPUSeconds            float64 `json:"cpu_seconds"`
	CPUPerDecisionUs      float64 `json:"cpu_per_decision_us"`
	DecisionsPerCPUSecond float64 `json:"decisions_per_cpu_second"`
	// CPUByProcess splits CPUPerDecisionUs by process.
	CPUByProcess map[string]float64 `json:"cpu_per_decision_us_by_process"`
}

// EnvoyBenchResult is the outcome of RunEnvoy.
type EnvoyBenchResult struct {
	Machine Machine      `json:"machine"`
	Options EnvoyOptions `json:"options"`
	// Reference is envoyproxy/ratelimit with Redis; ReferenceSkipped says
	// why it is missing when it is.
	Reference        *EnvoyTarget `json:"reference,omitempty"`
	ReferenceSkipped string       `json:"reference_skipped,omitempty"`
	ReferenceVersion string       `json:"reference_version"`
	// Central is allot up --rls-addr (the front end beside the partition's
	// leader, its embedded nats-server counted); Remote a front end in
	// another process (allot coordinator --quota-serve none --rls-addr)
	// counting over NATS in allot up's partition, both processes counted.
	Central EnvoyTarget `json:"central"`
	Remote  EnvoyTarget `json:"remote"`
	// Sidecar is allot agent --rls-addr answering a lease-mapped
	// descriptor from its lease (its own CPU; allot up, which leases,
	// idles beside it); SidecarOne the same with one call in flight, the
	// latency of a call on localhost without queueing.
	Sidecar    EnvoyTarget `json:"sidecar"`
	SidecarOne EnvoyTarget `json:"sidecar_one_in_flight"`
	// CPURatio is Central's decisions per CPU-second over the reference's
	// (target at least TargetEnvoyCPURatio), P99Ratio its p99 over the
	// reference's (target below 1).
	CPURatio float64 `json:"decisions_per_cpu_ratio,omitempty"`
	P99Ratio float64 `json:"p99_ratio,omitempty"`
}

// TargetEnvoyCPURatio is how many more decisions per CPU-second than the
// reference allot's central mode must make.
const TargetEnvoyCPURatio = 2.0

// The benchmark's configuration: one descriptor, a limit it never
// reaches, so that every decision counts a hit and answers OK.
const (
	envoyBenchDomain = "bench"
	envoyBenchConfig = `domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`
	// envoyBenchLease maps path=/api/* to a lease the sidecar holds.
	envoyBenchLease = `{"identifier_glob":"envoy/bench/path=/api/*","capacity":1e12,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`
)

// envoyTarget is a server under load: its gRPC address and the processes
// whose CPU counts.
type envoyTarget struct {
	result *EnvoyTarget
	addr   string
	procs  []*proc
	// lease: the requests name path=/api/<key> (lease-mapped for the
	// sidecar) instead of client=<key>.
	lease bool
}

// RunEnvoy measures Envoy's ShouldRateLimit: allot's central mode (in
// process beside the partition leader, and from a front end counting
// over NATS) against envoyproxy/ratelimit with Redis, with the same
// configuration, keys and calls in flight, alternating in phases; then
// allot's sidecar answering a lease-mapped descriptor.
func RunEnvoy(ctx context.Context, env *Env, o EnvoyOptions) (*EnvoyBenchResult, error) {
	o.fill(env.Short)
	if env.Allot == nil {
		return nil, errors.New("bench: the envoy benchmark runs allot in separate processes (not --in-process)")
	}
	res := &EnvoyBenchResult{Machine: DescribeMachine(), Options: o, ReferenceVersion: ReferenceModule}
	res.Central = EnvoyTarget{Name: "allot central (allot up --rls-addr)", CPUOf: "allot up (front end, partition leader, embedded nats-server)"}
	res.Remote = EnvoyTarget{Name: "allot central, front end over NATS", CPUOf: "allot coordinator --quota-serve none --rls-addr + allot up"}
	res.Sidecar = EnvoyTarget{Name: "allot sidecar (allot agent --rls-addr), lease-mapped", CPUOf: "allot agent"}
	res.SidecarOne = EnvoyTarget{Name: "allot sidecar, lease-mapped, 1 call in flight", CPUOf: "allot agent"}

	upProc, url, upRLS, err := startAllotUp(ctx, env)
	if err != nil {
		return nil, err
	}
	defer upProc.stop()
	if err := configure(ctx, url); err != nil {
		return nil, err
	}
	central := &envoyTarget{result: &res.Central, addr: upRLS, procs: []*proc{upProc}}
	remoteProc, err := startProc("allot coordinator", env.Allot(ctx, "coordinator", "--nats", url, "--quota-serve", "none", "--rls-addr", "127.0.0.1:0", "--log-level", "warn", "--metrics-addr", ""))
	if err != nil {
		return nil, err
	}
	defer remoteProc.stop()
	m, err := remoteProc.await(ctx, rlsAnnounced, 60*time.Second)
	if err != nil {
		return nil, err
	}
	remote := &envoyTarget{result: &res.Remote, addr: m[1], procs: []*proc{remoteProc, upProc}}
	targets := []*envoyTarget{central, remote}

	if o.NoReference {
		res.ReferenceSkipped = "--no-reference"
	} else {
		env.progressf("envoy: building and starting envoyproxy/ratelimit with Redis")
		ref, err := startReference(ctx, []byte(envoyBenchConfig))
		if err != nil {
			res.ReferenceSkipped = err.Error()
			env.progressf("envoy: the reference is skipped: %v", err)
		} else {
			defer ref.stop()
			res.Reference = &EnvoyTarget{Name: "envoyproxy/ratelimit + Redis", CPUOf: "ratelimit service + redis-server"}
			targets = append([]*envoyTarget{{result: res.Reference, addr: ref.addr, procs: []*proc{ref.service, ref.redis}}}, targets...)
		}
	}
	for _, t := range targets {
		if err := awaitRLS(ctx, t.addr, false); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", t.result.Name, err)
		}
	}
	load, err := newRLSLoad(o)
	if err != nil {
		return nil, err
	}
	hists := make([]*hdrhistogram.Histogram, len(targets))
	for i := range hists {
		hists[i] = newHist()
	}
	per := o.Duration / time.Duration(o.Phases)
	for ph := range o.Phases {
		for i, t := range targets {
			label := fmt.Sprintf("envoy %s, phase %d/%d", t.result.Name, ph+1, o.Phases)
			if err := load.phase(ctx, env, label, t, o.InFlight, o.Warmup, per, hists[i]); err != nil {
				return nil, err
			}
		}
	}
	for i, t := range targets {
		finishEnvoy(t.result, hists[i])
	}

	// The sidecar, beside the same allot up (its coordinator leases).
	agentProc, err := startProc("allot agent", env.Allot(ctx, "agent", "--nats", url, "--rls-addr", "127.0.0.1:0", "--log-level", "warn"))
	if err != nil {
		return nil, err
	}
	defer agentProc.stop()
	m, err = agentProc.await(ctx, rlsAnnounced, 60*time.Second)
	if err != nil {
		return nil, err
	}
	sidecar := &envoyTarget{result: &res.Sidecar, addr: m[1], procs: []*proc{agentProc}, lease: true}
	if err := awaitRLS(ctx, sidecar.addr, true); err != nil {
		return nil, fmt.Errorf("bench: sidecar: %w", err)
	}
	one := &envoyTarget{result: &res.SidecarOne, addr: sidecar.addr, procs: sidecar.procs, lease: true}
	h, hOne := newHist(), newHist()
	for ph := range o.Phases {
		if err := load.phase(ctx, env, fmt.Sprintf("envoy sidecar, phase %d/%d", ph+1, o.Phases), sidecar, o.InFlight, o.Warmup, per, h); err != nil {
			return nil, err
		}
		if err := load.phase(ctx, env, fmt.Sprintf("envoy sidecar, 1 in flight, phase %d/%d", ph+1, o.Phases), one, 1, o.Warmup, per, hOne); err != nil {
			return nil, err
		}
	}
	finishEnvoy(sidecar.result, h)
	finishEnvoy(one.result, hOne)
	if r := res.Reference; r != nil {
		res.CPURatio = safeDiv(res.Central.DecisionsPerCPUSecond, r.DecisionsPerCPUSecond)
		res.P99Ratio = safeDiv(res.Central.P99us, r.P99us)
	}
	if err := env.writeJSON("envoy.json", res); err != nil {
		return res, err
	}
	return res, env.writeFile("envoy.md", []byte(res.Markdown()))
}

// rlsAnnounced is how allot's commands say where their gRPC front end
// listens.
var rlsAnnounced = regexp.MustCompile(`envoy rate limit service \(gRPC[^)]*\) at (\S+)`)

// startAllotUp runs allot up with its Envoy front end.
func startAllotUp(ctx context.Context, env *Env) (p *proc, url, rls string, err error) {
	p, _, m, err := runAllotUp(ctx, env, "allot-bench-envoy-", []string{"--metrics-addr", "", "--log-level", "warn", "--rls-addr", "127.0.0.1:0"},
		regexp.MustCompile(`envoy rate limit service \(gRPC[^)]*\) at (\S+)(?s:.*)allot is up: NATS at (nats://\S+),`))
	if err != nil {
		return nil, "", "", err
	}
	return p, m[2], m[1], nil
}

// configure stores the benchmark's domain and lease template.
func configure(ctx context.Context, url string) error {
	return storeConfig(ctx, url, map[string]string{"envoy." + envoyBenchDomain: envoyBenchConfig, "templates.envoy-bench": envoyBenchLease})
}

// request is the benchmark's request for key k.
func envoyRequest(k int, lease bool) *rlspb.RateLimitRequest {
	e := &rlv3.RateLimitDescriptor_Entry{Key: "client", Value: "c" + strconv.Itoa(k)}
	if lease {
		e = &rlv3.RateLimitDescriptor_Entry{Key: "path", Value: "/api/" + strconv.Itoa(k)}
	}
	return &rlspb.RateLimitRequest{Domain: envoyBenchDomain, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{e}}}}
}

// awaitRLS waits until addr answers the benchmark's domain as configured.
func awaitRLS(ctx context.Context, addr string, lease bool) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.ShouldRateLimit(rctx, envoyRequest(-1, lease))
		cancel()
		if err == nil && resp.GetStatuses()[0].GetCurrentLimit() != nil {
			return nil
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no answer with the configured limit from %s: %v", addr, last)
}

// rlsLoad is the gRPC load generator: InFlight callers, each one call at
// a time, over Conns connections.
type rlsLoad struct {
	o     EnvoyOptions
	reqs  [2][]*rlspb.RateLimitRequest
	conns map[string][]*grpc.ClientConn
}

func newRLSLoad(o EnvoyOptions) (*rlsLoad, error) {
	l := &rlsLoad{o: o, conns: map[string][]*grpc.ClientConn{}}
	for k := range o.Keys {
		l.reqs[0] = append(l.reqs[0], envoyRequest(k, false))
		l.reqs[1] = append(l.reqs[1], envoyRequest(k, true))
	}
	return l, nil
}

// clients returns the connections to addr, dialled once.
func (l *rlsLoad) clients(addr string) ([]rlspb.RateLimitServiceClient, error) {
	if l.conns[addr] == nil {
		for range l.o.Conns {
			c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, err
			}
			l.conns[addr] = append(l.conns[addr], c)
		}
	}
	out := make([]rlspb.RateLimitServiceClient, len(l.conns[addr]))
	for i, c := range l.conns[addr] {
		out[i] = rlspb.NewRateLimitServiceClient(c)
	}
	return out, nil
}

// phase loads t with inFlight callers for warmup, then measures for d
// into h and t's result.
func (l *rlsLoad) phase(ctx context.Context, env *Env, label string, t *envoyTarget, inFlight int, warmup, d time.Duration, h *hdrhistogram.Histogram) error {
	clients, err := l.clients(t.addr)
	if err != nil {
		return err
	}
	reqs := l.reqs[0]
	if t.lease {
		reqs = l.reqs[1]
	}
	var recording, stop atomic.Bool
	var next atomic.Int64
	var mu sync.Mutex
	var decisions, over, errs int64
	var wg sync.WaitGroup
	for g := range inFlight {
		wg.Go(func() {
			mine := newHist()
			var n, ov, e int64
			c := clients[g%len(clients)]
			for !stop.Load() {
				req := reqs[int(next.Add(1))%len(reqs)]
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(ctx, req)
				dt := time.Since(t0)
				if !recording.Load() {
					continue
				}
				if err != nil {
					e++
					continue
				}
				n++
				if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
					ov++
				}
				_ = mine.RecordValue(dt.Microseconds())
			}
			mu.Lock()
			decisions, over, errs = decisions+n, over+ov, errs+e
			h.Merge(mine)
			mu.Unlock()
		})
	}
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
	}
	before := make([]procSample, len(t.procs))
	for i, p := range t.procs {
		if before[i], err = readProc(p.pid()); err != nil {
			stop.Store(true)
			wg.Wait()
			return err
		}
	}
	start := time.Now()
	recording.Store(true)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	recording.Store(false)
	secs := time.Since(start).Seconds()
	cpu := make([]time.Duration, len(t.procs))
	for i, p := range t.procs {
		after, err := readProc(p.pid())
		if err != nil {
			stop.Store(true)
			wg.Wait()
			return err
		}
		cpu[i] = after.cpu - before[i].cpu
	}
	stop.Store(true)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	r := t.result
	r.Decisions += decisions
	r.OverLimit += over
	r.Errors += errs
	r.Seconds += secs
	if r.CPUByProcess == nil {
		r.CPUByProcess = map[string]float64{}
	}
	for i, p := range t.procs {
		r.CPUSeconds += cpu[i].Seconds()
		r.CPUByProcess[p.name] += cpu[i].Seconds() // seconds until finishEnvoy
	}
	env.progressf("%s: %.0f decisions/s, %d errors", label, float64(decisions)/secs, errs)
	return nil
}

// finishEnvoy turns a target's sums into rates.
func finishEnvoy(r *EnvoyTarget, h *hdrhistogram.Histogram) {
	r.RPS = safeDiv(float64(r.Decisions), r.Seconds)
	r.P50us = float64(h.ValueAtQuantile(50))
	r.P99us = float64(h.ValueAtQuantile(99))
	r.P999us = float64(h.ValueAtQuantile(99.9))
	r.CPUPerDecisionUs = safeDiv(r.CPUSeconds*1e6, float64(r.Decisions))
	r.DecisionsPerCPUSecond = safeDiv(float64(r.Decisions), r.CPUSeconds)
	for k, v := range r.CPUByProcess {
		r.CPUByProcess[k] = safeDiv(v*1e6, float64(r.Decisions))
	}
}

// Markdown renders the result.
func (r *EnvoyBenchResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Envoy rate limit service (ShouldRateLimit)\n\n%s\n\n", r.Machine.Markdown())
	fmt.Fprintf(&b, "%d calls in flight over %d gRPC connections, one descriptor per call cycling over %d keys, limits never reached (every decision counts a hit and answers OK); %v measured per server in %d alternating phases after %v of warm-up each. CPU per decision counts every process named.\n\n",
		r.Options.InFlight, r.Options.Conns, r.Options.Keys, r.Options.Duration, r.Options.Phases, r.Options.Warmup)
	rows := [][]string{}
	add := func(t *EnvoyTarget) {
		var split []string
		for k, v := range t.CPUByProcess {
			split = append(split, fmt.Sprintf("%s %.0f", k, v))
		}
		rows = append(rows, []string{t.Name, f0(t.RPS), f0(t.P50us), f0(t.P99us), f0(t.P999us), f1(t.CPUPerDecisionUs), strings.Join(slices.Sorted(slices.Values(split)), ", "), f0(t.DecisionsPerCPUSecond), strconv.FormatInt(t.Errors, 10)})
	}
	if r.Reference != nil {
		add(r.Reference)
	}
	add(&r.Central)
	add(&r.Remote)
	add(&r.Sidecar)
	add(&r.SidecarOne)
	b.WriteString(table([]string{"server", "decisions/s", "p50 µs", "p99 µs", "p99.9 µs", "CPU µs/decision", "by process", "decisions per CPU-second", "errors"}, rows))
	if r.Reference == nil {
		fmt.Fprintf(&b, "\nThe reference was skipped: %s\n", r.ReferenceSkipped)
	} else {
		fmt.Fprintf(&b, "\nCentral mode against the reference (%s): %.2f× the decisions per CPU-second (target ≥ %.0f×: %s), p99 %.2f× the reference's (target below 1: %s).\n",
			r.ReferenceVersion, r.CPURatio, TargetEnvoyCPURatio, verdict(r.CPURatio >= TargetEnvoyCPURatio), r.P99Ratio, verdict(r.P99Ratio < 1))
	}
	fmt.Fprintf(&b, "The sidecar answers the lease-mapped descriptor in process, with no network hop: p99 of the gRPC call on localhost %.0f µs with one call in flight, %.0f µs with %d.\n", r.SidecarOne.P99us, r.Sidecar.P99us, r.Options.InFlight)
	return b.String()
}
