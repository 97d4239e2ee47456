package bench

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// AllResult gathers the results of RunAll.
type AllResult struct {
	Machine Machine           `json:"machine"`
	Seconds float64           `json:"seconds"`
	Load    *LoadResult       `json:"load,omitempty"`
	Quota   *QuotaBenchResult `json:"quota,omitempty"`
	Scale   *ScaleResult      `json:"scale,omitempty"`
	Agent   *AgentResult      `json:"agent,omitempty"`
	Sim     *SimResult        `json:"sim,omitempty"`
	Tree    *TreeOutcome      `json:"sim7,omitempty"`
	Errors  []string          `json:"errors,omitempty"`
}

// RunAll runs every benchmark in turn and writes summary.md and
// summary.json next to their own results. A failing benchmark is reported
// and the others still run.
func RunAll(ctx context.Context, env *Env, lo LoadOptions, qo QuotaOptions) (*AllResult, error) {
	start := time.Now()
	res := &AllResult{Machine: DescribeMachine()}
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			res.Errors = append(res.Errors, what+": "+err.Error())
		}
	}
	var err error
	res.Load, err = RunLoad(ctx, env, lo)
	note("load", err)
	res.Quota, err = RunQuota(ctx, env, qo)
	note("quota", err)
	res.Scale, err = RunScale(ctx, env)
	note("scale", err)
	res.Agent, err = RunAgent(ctx, env)
	note("agent", err)
	res.Sim, err = RunSim(ctx, env)
	note("sim", err)
	res.Tree, err = RunTreeSim(ctx, env)
	note("sim 7", err)
	res.Seconds = time.Since(start).Seconds()
	if err := env.writeJSON("summary.json", res); err != nil {
		errs = append(errs, err)
	}
	if err := env.writeFile("summary.md", []byte(res.Markdown())); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("bench: %d benchmarks failed: %v", len(errs), errs)
	}
	return res, nil
}

// Markdown renders every result, headline ratios first.
func (r *AllResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## allot benchmark results\n\nMachine: %s. Total time %.0fs.\n\n", r.Machine.Markdown(), r.Seconds)
	b.WriteString(r.headline())
	for _, s := range []interface{ Markdown() string }{r.Load, r.Quota, r.Scale, r.Agent, r.Sim, r.Tree} {
		if s == nil || isNil(s) {
			continue
		}
		b.WriteString("\n" + s.Markdown())
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "\nError: %s\n", e)
	}
	return b.String()
}

func isNil(s interface{ Markdown() string }) bool {
	switch v := s.(type) {
	case *LoadResult:
		return v == nil
	case *QuotaBenchResult:
		return v == nil
	case *ScaleResult:
		return v == nil
	case *AgentResult:
		return v == nil
	case *SimResult:
		return v == nil
	case *TreeOutcome:
		return v == nil
	}
	return false
}

// headline is the table of targets.
func (r *AllResult) headline() string {
	var rows [][]string
	if l := r.Load; l != nil {
		rows = append(rows, []string{"coordinator throughput ÷ bare NATS echo, same concurrency", fmt.Sprintf("≥ %.1f×", l.TargetRatio), fmt.Sprintf("%.2f× (%.0f vs %.0f req/s)", l.Ratio, l.Coordinator.RPS, l.Baseline.RPS), verdict(l.Ratio >= l.TargetRatio)},
			[]string{"coordinator CPU per request ÷ bare NATS echo's", fmt.Sprintf("≤ %.1f×", l.TargetCPURatio), fmt.Sprintf("%.2f×", l.CPURatio), verdict(l.CPURatio <= l.TargetCPURatio)})
	}
	if q := r.Quota; q != nil {
		for _, run := range q.Runs {
			rows = append(rows, []string{fmt.Sprintf("quota decisions ÷ bare NATS echo, same concurrency, %d partition(s)", run.Partitions), fmt.Sprintf("≥ %.1f×", q.TargetRatio), fmt.Sprintf("%.2f× (%.0f vs %.0f req/s, p99 %.0f µs)", run.Ratio, run.Quota.RPS, run.Baseline.RPS, run.Quota.P99us), verdict(run.Ratio >= q.TargetRatio)})
		}
	}
	if s := r.Scale; s != nil {
		rows = append(rows, []string{"one FAIR_SHARE round over 100,000 clients", fmt.Sprintf("≤ %d ms", TargetFairShareMS), fmt.Sprintf("%.2f ms (%.2f× sorting them; coordinator round %.2f ms)", s.FairShare100kMS, sortRatio(s, 100_000), s.Coordinator100kMS), verdict(s.FairShare100kMS > 0 && s.FairShare100kMS <= TargetFairShareMS)})
		if len(s.Coordinator) > 0 {
			last := s.Coordinator[len(s.Coordinator)-1]
			rows = append(rows, []string{"coordinator memory per client lease", fmt.Sprintf("≤ %d B", TargetBytesPerLease), fmt.Sprintf("%.0f B at 100,000, %.0f B at %d", s.BytesPerLease100k, last.BytesPerLease, last.Clients),
				verdict(s.BytesPerLease100k > 0 && s.BytesPerLease100k <= TargetBytesPerLease && last.BytesPerLease <= TargetBytesPerLease)})
			if rf := last.Refresh; rf != nil {
				rows = append(rows, []string{fmt.Sprintf("refreshes of %d held leases ÷ bare NATS echo, same run", last.Clients), fmt.Sprintf("≥ %.1f×, p99 ≤ %.0f×", TargetRefreshRatio, float64(TargetRefreshP99Ratio)),
					fmt.Sprintf("%.2f× (%.0f vs %.0f req/s), p99 %.2f×", rf.Ratio, rf.Coordinator.RPS, rf.Echo.RPS, rf.P99Ratio), verdict(rf.Ratio >= TargetRefreshRatio && rf.P99Ratio <= TargetRefreshP99Ratio)})
			}
		}
		if n := len(s.Rounds); n > 0 {
			first, last := s.Rounds[0], s.Rounds[n-1]
			rows = append(rows, []string{"ledger round per changed client, smallest to largest", "flat-ish", fmt.Sprintf("%.1f µs at %d, %.1f µs at %d (%.1f×)", first.USPerChange, first.Clients, last.USPerChange, last.Clients, last.RatioToFirst), "see scale"})
		}
	}
	if a := r.Agent; a != nil {
		for _, h := range a.HotPaths {
			if h.Target > 0 {
				rows = append(rows, []string{h.Name + " ÷ x/time/rate Allow", fmt.Sprintf("≤ %.1f×, 0 allocs", h.Target), fmt.Sprintf("%.2f×, %.0f allocs", h.RatioToAllow, h.AllocsPerOp), verdict(h.RatioToAllow <= h.Target && h.AllocsPerOp == 0)})
			}
		}
	}
	if s := r.Sim; s != nil {
		rows = append(rows, s.headlineRows()...)
	}
	if t := r.Tree; t != nil {
		rows = append(rows, t.headlineRows()...)
	}
	return table([]string{"target", "wanted", "measured", "verdict"}, rows)
}

func sortRatio(s *ScaleResult, n int) float64 {
	for _, p := range s.Algorithms {
		if p.Clients == n && p.Algorithm == "FAIR_SHARE" {
			return p.RatioToSort
		}
	}
	return 0
}
