package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/allot/allot/internal/wire"
)

// Markdown renders the result as a table.
func (r *LoadResult) Markdown() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "### Load: GetCapacity over TCP loopback\n\n")
	fmt.Fprintf(&b, "%d simulated clients on %d connections, %d requests in flight each (%d in flight), %d resources, %d per request, %s; round interval %v; %v measured per target in %d alternating phases after %v warm-up each.\n\n",
		o.Clients, o.Conns, o.Pipeline, r.InFlight, o.Resources, o.PerRequest, encodingLabel(o.encoding()), roundLabel(o.Round), o.Duration, o.Phases, o.Warmup)
	targets := []LoadTarget{r.Baseline, r.Coordinator}
	for _, t := range []*LoadTarget{r.Partitioned, r.OneProcess} {
		if t != nil {
			targets = append(targets, *t)
		}
	}
	b.WriteString(targetTable(targets...))
	fmt.Fprintf(&b, "\n**coordinator / bare echo: throughput %.2f× (target ≥ %.1f×: %s), p99 latency %.2f×, CPU per request %.2f× (target ≤ %.1f×: %s).**\n\n",
		r.Ratio, r.TargetRatio, verdict(r.Ratio >= r.TargetRatio), r.P99Ratio, r.CPURatio, r.TargetCPURatio, verdict(r.CPURatio <= r.TargetCPURatio))
	if r.Partitioned != nil {
		shares := make([]string, len(r.PartitionShares))
		for i, sh := range r.PartitionShares {
			shares[i] = fmt.Sprintf("%.3f", sh)
		}
		procs := "in process"
		if r.Options.PartitionProcs > 0 {
			procs = fmt.Sprintf("GOMAXPROCS=%d each; the one coordinator the Go default, %d CPUs", r.Options.PartitionProcs, r.Machine.CPUs)
		}
		fmt.Fprintf(&b, "**%d lease partitions (%s) / one coordinator: CPU per request (all partitions' processes summed) %.2f× (target ≤ 1.1×: %s); each partition's share of the requests: %s.**\n\n",
			r.Options.LeasePartitions, procs, r.PartitionCPURatio, verdict(r.PartitionCPURatio <= 1.1), strings.Join(shares, ", "))
		one, parts := r.Coordinator, *r.Partitioned
		var oneRound float64
		if s := r.CoordinatorStats; s != nil {
			oneRound = safeDiv(float64(s.Requests), float64(s.Rounds))
		}
		fmt.Fprintf(&b, "Per request, one coordinator / the partitions: read and write system calls %.3f / %.3f, context switches %.3f / %.3f; requests per round %.1f / %.1f.\n\n",
			perReq(one.Syscalls, one), perReq(parts.Syscalls, parts), perReq(one.Switches, one), perReq(parts.Switches, parts),
			oneRound, r.PartitionRequestsPerRound)
		if t := r.OneProcess; t != nil {
			fmt.Fprintf(&b, "**The same %d partitions served by one process / one coordinator: CPU per request %.2f×** (system calls %.3f, context switches %.3f per request).\n\n",
				r.Options.LeasePartitions, r.OneProcessCPURatio, perReq(t.Syscalls, *t), perReq(t.Switches, *t))
		}
	}
	fmt.Fprintf(&b, "CPU and RSS: %s.\n", r.CPUScope)
	if s := r.CoordinatorStats; s != nil {
		fmt.Fprintf(&b, "Coordinator STATS at the end: %d rounds for %d requests (%.1f requests per round), last round %.3f ms, longest %.3f ms.\n",
			s.Rounds, s.Requests, safeDiv(float64(s.Requests), float64(s.Rounds)), s.LastRoundMS, s.MaxRoundMS)
	}
	return b.String()
}

// perReq is n per request of t.
func perReq(n int64, t LoadTarget) float64 { return safeDiv(float64(n), float64(t.Requests)) }

func encodingLabel(e wire.Encoding) string {
	if e == wire.JSON {
		return "JSON requests (the echo answers the same JSON payload)"
	}
	return "binary protobuf"
}

func roundLabel(d time.Duration) string {
	if d <= 0 {
		return "0 (answer at once; what is queued is batched)"
	}
	return d.String()
}
