package bench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/allot/allot/agent"
)

// TargetAgentRatio bounds the agent's Allow and Wait relative to
// x/time/rate's Allow, with 0 allocations: a service swapping x/time/rate
// for the agent must not notice it on its hot path.
const TargetAgentRatio = 1.5

// HotPath is one agent operation next to its baseline, measured in
// alternation in the same run.
type HotPath struct {
	Name         string  `json:"name"`
	NSPerOp      float64 `json:"ns_per_op"`
	AllocsPerOp  float64 `json:"allocs_per_op"`
	Baseline     string  `json:"baseline"`
	BaseNSPerOp  float64 `json:"baseline_ns_per_op"`
	BaseAllocs   float64 `json:"baseline_allocs_per_op"`
	Ratio        float64 `json:"ratio"`
	RatioToAllow float64 `json:"ratio_to_xrate_allow"`
	// Target is TargetAgentRatio for operations the target covers, else 0.
	Target float64 `json:"target,omitempty"`
}

// Accuracy is admitted events per second against the granted rate.
type Accuracy struct {
	Method       string  `json:"method"`
	Goroutines   int     `json:"goroutines"`
	Granted      float64 `json:"granted_per_s"`
	Admitted     float64 `json:"admitted_per_s"`
	Ratio        float64 `json:"ratio"`
	BaseAdmitted float64 `json:"xrate_admitted_per_s"`
	BaseRatio    float64 `json:"xrate_ratio"`
}

// AgentResult is the outcome of RunAgent.
type AgentResult struct {
	Machine  Machine    `json:"machine"`
	HotPaths []HotPath  `json:"hot_paths"`
	Accuracy []Accuracy `json:"accuracy"`
	Seconds  float64    `json:"accuracy_seconds"`
}

// benchRate and benchBurst make every hot-path call admitted at once while
// still running the token arithmetic (a finite rate, a huge bucket).
const benchRate, benchBurst = 1e9, 1 << 30

// hotPathCase is an agent operation and its baseline.
type hotPathCase struct {
	name, baseline string
	agent, base    func() func()
	parallel       bool
	target         bool
}

// newBenchAgent returns an agent on nc that has no coordinator to talk to:
// its limiters run at their initial capacity (Safe mode before any lease).
func newBenchAgent(nc *nats.Conn) (*agent.Agent, error) {
	a, err := agent.New(nc, agent.WithNode("bench-nobody"), agent.WithClientID("bench-hot-path"),
		agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, fmt.Errorf("bench: agent: %w", err)
	}
	return a, nil
}

// hotPathCases builds the operations over agent a.
func hotPathCases(a *agent.Agent) ([]hotPathCase, error) {
	l, err := a.Rate("bench/rate", agent.WithWants(benchRate), agent.WithInitialCapacity(benchRate), agent.WithBurst(benchBurst))
	if err != nil {
		return nil, fmt.Errorf("bench: agent rate: %w", err)
	}
	g, err := a.Gauge("bench/gauge", agent.WithWants(1<<20), agent.WithInitialCapacity(1<<20))
	if err != nil {
		return nil, fmt.Errorf("bench: agent gauge: %w", err)
	}
	// Let the bucket fill.
	deadline := time.Now().Add(5 * time.Second)
	for l.Tokens() < 1000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	x := rate.NewLimiter(benchRate, benchBurst)
	ctx := context.Background()
	sem := make(chan struct{}, 1<<20)
	return []hotPathCase{
		{name: "agent RateLimiter.Allow", baseline: "x/time/rate Limiter.Allow", target: true,
			agent: func() func() { return func() { l.Allow() } },
			base:  func() func() { return func() { x.Allow() } }},
		{name: "agent RateLimiter.Wait", baseline: "x/time/rate Limiter.Wait", target: true,
			agent: func() func() { return func() { _ = l.Wait(ctx) } },
			base:  func() func() { return func() { _ = x.Wait(ctx) } }},
		{name: "agent RateLimiter.Allow, parallel", baseline: "x/time/rate Limiter.Allow, parallel", parallel: true,
			agent: func() func() { return func() { l.Allow() } },
			base:  func() func() { return func() { x.Allow() } }},
		{name: "agent RateLimiter.ReserveN(1)", baseline: "x/time/rate Limiter.ReserveN(now, 1)",
			agent: func() func() { return func() { l.ReserveN(1) } },
			base:  func() func() { return func() { x.ReserveN(time.Now(), 1) } }},
		{name: "agent Gauge.Acquire+Release", baseline: "channel semaphore send+receive",
			agent: func() func() {
				return func() {
					_ = g.Acquire(ctx, 1)
					g.Release(1)
				}
			},
			base: func() func() {
				return func() {
					sem <- struct{}{}
					<-sem
				}
			}},
	}, nil
}

// measureParallel runs f on GOMAXPROCS goroutines and returns the time per
// call across all of them.
func measureParallel(minTime time.Duration, f func()) float64 {
	procs := runtime.GOMAXPROCS(0)
	return measure(minTime, func() {
		const k = 256
		var wg sync.WaitGroup
		for range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range k {
					f()
				}
			}()
		}
		wg.Wait()
	}) / float64(256*procs)
}

// RunAgent measures the agent's hot path next to x/time/rate and the
// accuracy of its limiters against a real coordinator's grants.
func RunAgent(ctx context.Context, env *Env) (*AgentResult, error) {
	res := &AgentResult{Machine: DescribeMachine()}
	srv, shutdown, err := startServer()
	if err != nil {
		return nil, err
	}
	defer shutdown()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("allot bench agent"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer nc.Close()
	a, err := newBenchAgent(nc)
	if err != nil {
		return nil, err
	}
	defer func() { _ = a.Close() }()
	cases, err := hotPathCases(a)
	if err != nil {
		return nil, err
	}
	rounds, minTime := 5, 500*time.Millisecond
	if env.Short {
		rounds, minTime = 3, 250*time.Millisecond
	}
	var xAllow float64
	for _, c := range cases {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		af, bf := c.agent(), c.base()
		m := measure
		if c.parallel {
			m = measureParallel
		}
		var as, bs []float64
		for range rounds {
			as = append(as, m(minTime, af))
			bs = append(bs, m(minTime, bf))
		}
		slices.Sort(as)
		slices.Sort(bs)
		h := HotPath{Name: c.name, Baseline: c.baseline, NSPerOp: as[len(as)/2], BaseNSPerOp: bs[len(bs)/2]}
		if !c.parallel {
			h.AllocsPerOp = allocsPerRun(1000, af)
			h.BaseAllocs = allocsPerRun(1000, bf)
		}
		h.Ratio = h.NSPerOp / h.BaseNSPerOp
		if xAllow == 0 {
			xAllow = h.BaseNSPerOp // the first case is Allow
		}
		h.RatioToAllow = h.NSPerOp / xAllow
		if c.target {
			h.Target = TargetAgentRatio
		}
		res.HotPaths = append(res.HotPaths, h)
		env.progressf("agent: %-36s %7.1f ns/op %3.0f allocs   %-38s %7.1f ns/op   ratio %.2f",
			h.Name, h.NSPerOp, h.AllocsPerOp, h.Baseline, h.BaseNSPerOp, h.Ratio)
	}

	res.Seconds = 3
	if env.Short {
		res.Seconds = 1.5
	}
	acc, err := runAccuracy(ctx, env, srv.ClientURL(), time.Duration(res.Seconds*float64(time.Second)))
	if err != nil {
		return nil, err
	}
	res.Accuracy = acc
	if err := env.writeJSON("agent.json", res); err != nil {
		return res, err
	}
	return res, env.writeFile("agent.md", []byte(res.Markdown()))
}

// runAccuracy asks a real coordinator for several rates and counts what
// the agent's limiter admits per second, next to x/time/rate at the same
// rate and burst.
func runAccuracy(ctx context.Context, env *Env, url string, d time.Duration) ([]Accuracy, error) {
	nc, err := nats.Connect(url, nats.Name("allot bench accuracy"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer nc.Close()
	c, err := startCoordinator(ctx, nc, coordOptions{node: "accuracy", bucket: "bench_accuracy",
		tmpl: benchTemplate(1e6, time.Minute, 5*time.Second)}, env.logger())
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	a, err := agent.New(nc, agent.WithNode("accuracy"), agent.WithClientID("bench-accuracy"), agent.WithLogger(env.logger()))
	if err != nil {
		return nil, fmt.Errorf("bench: agent: %w", err)
	}
	defer func() { _ = a.Close() }()
	var out []Accuracy
	for _, g := range []float64{100, 1000, 10000} {
		l, err := a.Rate(fmt.Sprintf("accuracy/%g", g), agent.WithWants(g))
		if err != nil {
			return nil, fmt.Errorf("bench: agent rate: %w", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for st := l.Status(); !st.Leased || st.Granted != g; st = l.Status() {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("bench: no lease of %g after 10s: %+v", g, st)
			}
			time.Sleep(5 * time.Millisecond)
		}
		granted := l.Status().Granted
		x := rate.NewLimiter(rate.Limit(granted), l.Burst())
		for _, m := range []struct {
			name string
			gr   int
			run  func(ctx context.Context, allow func() bool, wait func(context.Context) error) int64
		}{
			{"Wait", 4, countWait},
			{"Allow", 1, countAllow},
		} {
			p := Accuracy{Method: m.name, Goroutines: m.gr, Granted: granted}
			n := admitted(ctx, d, m.gr, func(c context.Context) int64 { return m.run(c, l.Allow, l.Wait) })
			p.Admitted = float64(n) / d.Seconds()
			n = admitted(ctx, d, m.gr, func(c context.Context) int64 { return m.run(c, x.Allow, x.Wait) })
			p.BaseAdmitted = float64(n) / d.Seconds()
			p.Ratio, p.BaseRatio = p.Admitted/granted, p.BaseAdmitted/granted
			out = append(out, p)
			env.progressf("agent accuracy: %-5s granted %6.0f/s  admitted %8.1f/s (%.4f)  x/time/rate %8.1f/s (%.4f)",
				p.Method, granted, p.Admitted, p.Ratio, p.BaseAdmitted, p.BaseRatio)
		}
	}
	return out, nil
}

// admitted runs gr copies of run for a warm-up and then for d, and returns
// the events admitted during d.
func admitted(ctx context.Context, d time.Duration, gr int, run func(context.Context) int64) int64 {
	warm, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	var wg sync.WaitGroup
	for range gr {
		wg.Add(1)
		go func() { defer wg.Done(); run(warm) }()
	}
	wg.Wait()
	cancel()
	mctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var total atomic.Int64
	for range gr {
		wg.Add(1)
		go func() { defer wg.Done(); total.Add(run(mctx)) }()
	}
	wg.Wait()
	return total.Load()
}

// countWait calls wait in a closed loop until ctx ends.
func countWait(ctx context.Context, _ func() bool, wait func(context.Context) error) int64 {
	var n int64
	for wait(ctx) == nil {
		n++
	}
	return n
}

// countAllow spins on allow until ctx ends.
func countAllow(ctx context.Context, allow func() bool, _ func(context.Context) error) int64 {
	var n int64
	for i := 0; ; i++ {
		if i%256 == 0 && ctx.Err() != nil {
			return n
		}
		if allow() {
			n++
		}
	}
}

// Markdown renders the result as tables.
func (r *AgentResult) Markdown() string {
	var b strings.Builder
	b.WriteString("### Agent hot path\n\n")
	b.WriteString("Each operation and its baseline measured alternately in the same run (median); every call is admitted (rate 1e9/s, burst 2^30), so this is the cost of the token arithmetic and locking. Parallel: all cores on one limiter.\n\n")
	var rows [][]string
	met := true
	for _, h := range r.HotPaths {
		tgt := "—"
		if h.Target > 0 {
			ok := h.RatioToAllow <= h.Target && h.AllocsPerOp == 0
			met = met && ok
			tgt = fmt.Sprintf("≤ %.1f× x/rate Allow, 0 allocs: %s", h.Target, verdict(ok))
		}
		rows = append(rows, []string{h.Name, f1(h.NSPerOp), f0(h.AllocsPerOp), h.Baseline, f1(h.BaseNSPerOp), f0(h.BaseAllocs), f2(h.Ratio), f2(h.RatioToAllow), tgt})
	}
	b.WriteString(table([]string{"operation", "ns/op", "allocs", "baseline", "ns/op", "allocs", "÷ baseline", "÷ x/rate Allow", "target"}, rows))
	fmt.Fprintf(&b, "\n**Allow and Wait within %.1f× of x/time/rate Allow with 0 allocations: %s.**\n\n", TargetAgentRatio, verdict(met))
	fmt.Fprintf(&b, "Accuracy: a real coordinator grants the rate; the limiter is driven for %.1fs after a 0.3s warm-up (Wait: closed loop on 4 goroutines; Allow: one goroutine spinning), next to x/time/rate at the same rate and burst.\n\n", r.Seconds)
	rows = rows[:0]
	for _, a := range r.Accuracy {
		rows = append(rows, []string{a.Method, f0(a.Granted), f1(a.Admitted), f3(a.Ratio), f1(a.BaseAdmitted), f3(a.BaseRatio)})
	}
	b.WriteString(table([]string{"method", "granted/s", "admitted/s", "admitted ÷ granted", "x/rate admitted/s", "x/rate ÷ limit"}, rows))
	return b.String()
}
