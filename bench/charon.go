package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/sources"
)

// CharonOptions configure the domain-limits benchmark (`allot bench
// charon`). Zero fields take the defaults of DefaultQuotaOptions' load.
type CharonOptions struct {
	ClosedLoop
}

// CharonRun is one operation measured against the bare echo.
type CharonRun struct {
	Op       string     `json:"op"`
	Baseline LoadTarget `json:"baseline"`
	Domain   LoadTarget `json:"domain"`
	// Ratio is decisions per second over the echo's replies per second;
	// the target is at least TargetCharonRatio.
	Ratio    float64 `json:"ratio"`
	P99Ratio float64 `json:"p99_ratio"`
	CPURatio float64 `json:"cpu_per_request_ratio"`
	// Sample is one reply of the operation, taken before the run, to show
	// what was measured (a grant).
	Sample string `json:"sample"`
	// Holds are the domain server's live holds right after its last
	// phase (reserve only), and RSSPerHold the bytes of its resident set
	// beyond the echo's per live hold then.
	Holds      int     `json:"holds,omitempty"`
	RSSPerHold float64 `json:"rss_bytes_per_hold,omitempty"`
}

// CharonBenchResult is the outcome of RunCharon.
type CharonBenchResult struct {
	Machine     Machine       `json:"machine"`
	Options     CharonOptions `json:"options"`
	InFlight    int           `json:"in_flight"`
	CPUScope    string        `json:"cpu_scope"`
	Runs        []CharonRun   `json:"runs"`
	TargetRatio float64       `json:"target_ratio"`
	// TargetCPURatio is the most CPU per decision over the echo's.
	TargetCPURatio float64 `json:"target_cpu_per_decision_ratio"`
}

// TargetCharonRatio is the decision throughput the domain server must
// reach relative to the bare echo: deciding may cost at most half of the
// request rate a bare request-reply reaches. TargetCharonCPURatio is the
// most CPU per decision it may spend relative to the echo's.
const (
	TargetCharonRatio    = 0.5
	TargetCharonCPURatio = 1.3
)

// charonBenchHoldTTL is the benchmark server's hold TTL: nobody refreshes
// the benchmark's holds, so they are released by expiry this soon after
// their reserve.
const charonBenchHoldTTL = 2 * time.Second

// charonBenchConfig is namespace "cb": "api", a rate resource with three
// burst tiers whose limits the load never reaches (every request goes
// through the tiers and is granted), and "pool", a copy resource without
// limits.
func charonBenchConfig() map[string]*domainlimit.Namespace {
	const big = 1_000_000_000
	return map[string]*domainlimit.Namespace{"cb": {Name: "cb", Resources: map[string]domainlimit.Resource{
		"api": {Name: "api", Kind: domainlimit.KindRate, Rate: domainlimit.RateSpec{Hard: domainlimit.Unlimited, Global: domainlimit.Unlimited,
			Tiers: []domainlimit.Tier{
				{Limit: big, Window: time.Second, Active: time.Hour, Cooldown: time.Second},
				{Limit: big, Window: time.Second, Active: time.Hour, Cooldown: time.Second},
				{Limit: big, Window: time.Second, Active: time.Hour, Cooldown: time.Second}}}},
		"pool": {Name: "pool", Kind: domainlimit.KindCopies, Copies: domainlimit.PermissiveCopies()},
	}}}
}

// serveDomain runs the domain server on its own connection to url.
func serveDomain(ctx context.Context, url string, log *slog.Logger) (stop func(), err error) {
	nc, err := nats.Connect(url, nats.Name("allot bench domain"))
	if err != nil {
		return nil, fmt.Errorf("bench: domain server: connect: %w", err)
	}
	cfg := charonBenchConfig()
	s, err := domainserver.New(nc, domainserver.Options{Config: sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return cfg }),
		HoldTTL: charonBenchHoldTTL, Logger: log})
	if err == nil {
		err = s.Start(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: domain server: %w", err)
	}
	return func() { s.Stop(); nc.Close() }, nil
}

// RunCharon measures the domain server's request (rate, three tiers) and
// reserve (copies) decisions against a bare NATS echo of the same JSON
// payload, at the same concurrency.
func RunCharon(ctx context.Context, env *Env, o CharonOptions) (*CharonBenchResult, error) {
	o.ClosedLoop.fill(DefaultQuotaOptions(env.Short).ClosedLoop)
	res := &CharonBenchResult{Machine: DescribeMachine(), Options: o, InFlight: o.Clients * o.Pipeline, TargetRatio: TargetCharonRatio, TargetCPURatio: TargetCharonCPURatio}
	res.CPUScope = "responder process alone (child process); the callers and nats-server run in the parent, all on the same cores"
	if env.Child == nil {
		res.CPUScope = "whole process: domain server, callers and nats-server together (in-process mode)"
	}
	url, echo, stop, err := startEchoServer(ctx, env, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	ds, err := env.startHelper(ctx, RoleDomain, url, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ds.stop() }()
	for _, op := range []string{domainwire.OpRequest, domainwire.OpReserve} {
		run, err := runCharonOp(ctx, env, o, url, op, echo, ds)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *run)
	}
	if err := env.writeJSON("charon.json", res); err != nil {
		return res, err
	}
	return res, env.writeFile("charon.md", []byte(res.Markdown()))
}

// charonPayload is caller client's request for op: a domain of its own.
func charonPayload(op string, client int) (subject string, body []byte) {
	domain := "d" + strconv.Itoa(client)
	if op == domainwire.OpRequest {
		body, _ = json.Marshal(domainwire.Request{Domain: domain, Copies: 1})
		return domainwire.Subject(quotaBenchNode, op, "cb", "api"), body
	}
	body, _ = json.Marshal(domainwire.Reserve{Domain: domain, Copies: 1, ClientID: "bench-" + strconv.Itoa(client)})
	return domainwire.Subject(quotaBenchNode, op, "cb", "pool"), body
}

func runCharonOp(ctx context.Context, env *Env, o CharonOptions, url, op string, echo, ds *helper) (*CharonRun, error) {
	run := &CharonRun{Op: op}
	// One request first: the run must measure grants, not errors.
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	subject, body := charonPayload(op, -1)
	m, err := nc.Request(subject, body, 5*time.Second)
	nc.Close()
	if err != nil {
		return nil, fmt.Errorf("bench: charon %s: %w", op, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" || !strings.Contains(string(m.Data), `"granted":1`) {
		return nil, fmt.Errorf("bench: charon %s is not granted: %s %s", op, code, m.Data)
	}
	run.Sample = string(m.Data)
	g, err := newGenerator(url, o.Conns, o.Clients, o.Pipeline, func(client int) ([]byte, []string, error) {
		subject, body := charonPayload(op, client)
		return body, []string{echoSubject, subject}, nil
	})
	if err != nil {
		return nil, err
	}
	defer g.close()
	run.Baseline.Name, run.Domain.Name = "bare NATS echo", "domain server: "+op
	if _, err := g.alternate(ctx, env, "charon "+op, o.ClosedLoop, []*LoadTarget{&run.Baseline, &run.Domain}, []*helper{echo, ds}); err != nil {
		return nil, err
	}
	if op == domainwire.OpReserve {
		// The domain server's phase was the last: its holds from then are
		// still live (they expire one hold TTL after their reserve), and
		// its resident set was read at its end.
		st, err := fetchDomainStats(g.conns[0])
		if err != nil {
			return nil, err
		}
		run.Holds = st.Holds
		if st.Holds > 0 {
			run.RSSPerHold = (run.Domain.RSSMiB - run.Baseline.RSSMiB) * (1 << 20) / float64(st.Holds)
		}
	}
	run.Ratio = safeDiv(run.Domain.RPS, run.Baseline.RPS)
	run.P99Ratio = safeDiv(run.Domain.P99us, run.Baseline.P99us)
	run.CPURatio = safeDiv(run.Domain.CPUPerReqUs, run.Baseline.CPUPerReqUs)
	return run, nil
}

// Markdown renders the result as a table.
func (r *CharonBenchResult) Markdown() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "### Domain limits: request and reserve decisions over TCP loopback\n\n")
	fmt.Fprintf(&b, "%d callers (one domain each) on %d connections, %d in flight each (%d in all), JSON on allot.root.domain.<op>.cb.<resource>: request on a rate resource with three burst tiers, reserve of one copy (released by the %v hold expiry, as nobody refreshes it); the echo answers the same payload. %v measured per target in %d alternating phases after %v warm-up each.\n\n",
		o.Clients, o.Conns, o.Pipeline, r.InFlight, charonBenchHoldTTL, o.Duration, o.Phases, o.Warmup)
	var targets []LoadTarget
	for _, run := range r.Runs {
		targets = append(targets, run.Baseline, run.Domain)
	}
	b.WriteString(targetTable(targets...))
	b.WriteString("\n")
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "- **%s: domain server / bare echo throughput %.2f× (target ≥ %.1f×: %s)**, p99 %.2f×, **CPU per decision %.2f× (target ≤ %.1f×: %s)**",
			run.Op, run.Ratio, r.TargetRatio, verdict(run.Ratio >= r.TargetRatio), run.P99Ratio, run.CPURatio, r.TargetCPURatio, verdict(run.CPURatio <= r.TargetCPURatio))
		if run.Holds > 0 {
			fmt.Fprintf(&b, "; %d live holds at the end, %.0f bytes of resident set beyond the echo's per hold", run.Holds, run.RSSPerHold)
		}
		b.WriteString(".\n")
	}
	fmt.Fprintf(&b, "\nCPU and RSS: %s.\n", r.CPUScope)
	return b.String()
}
