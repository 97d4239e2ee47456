package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/opstatus"
)

// partsNode is the node the load benchmark's lease partitions serve,
// beside the single coordinator's root; onePartsNode is the node of the
// partitions all served by one process (LoadOptions.PartitionsOneProcess).
const (
	partsNode    = "parts"
	onePartsNode = "parts1"
)

// startOneProcessParts starts one coordinator helper serving every lease
// partition of onePartsNode, each process's GOMAXPROCS the Go default as
// the single coordinator's.
func (e *Env) startOneProcessParts(ctx context.Context, url string, o LoadOptions) (*helper, error) {
	return e.startHelper(ctx, RoleCoordinator, url, append([]string{"--round", o.Round.String(), "--node", onePartsNode,
		"--all-lease-partitions", "--lease-partitions", fmt.Sprint(o.LeasePartitions)}, o.intakeArgs()...))
}

// startLeaseParts starts one coordinator helper per lease partition of
// partsNode. The helper returned stands for all: its pid lists theirs
// (readProc sums their CPU and memory) and stop stops them all.
func (e *Env) startLeaseParts(ctx context.Context, url string, o LoadOptions) (*helper, error) {
	var hs []*helper
	stop := func() error {
		var first error
		for _, h := range hs {
			if err := h.stop(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	// Each process sized to its share of the cores (LoadOptions.fill), as
	// a deployment of N partitions on one host would be: N processes of
	// GOMAXPROCS = all cores contend for them and wake each other's idle
	// threads.
	var environ []string
	if o.PartitionProcs > 0 {
		environ = []string{fmt.Sprintf("GOMAXPROCS=%d", o.PartitionProcs)}
	}
	for p := range o.LeasePartitions {
		h, err := e.startHelperEnv(ctx, RoleCoordinator, url, append([]string{"--round", o.Round.String(), "--node", partsNode,
			"--lease-partition", fmt.Sprint(p), "--lease-partitions", fmt.Sprint(o.LeasePartitions)}, o.intakeArgs()...), environ)
		if err != nil {
			_ = stop()
			return nil, err
		}
		hs = append(hs, h)
	}
	pids := make([]string, len(hs))
	for i, h := range hs {
		pids[i] = h.pid
	}
	pid := strings.Join(pids, ",")
	if hs[0].pid == "self" {
		pid = "self" // in process: the process is all of them
	}
	return &helper{role: RoleCoordinator, pid: pid, stop: stop, output: hs[0].output}, nil
}

// fetchAllStats asks every coordinator for its micro STATS, gathering
// the replies for wait.
func fetchAllStats(nc *nats.Conn, wait time.Duration) ([]coordinator.Stats, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("bench: coordinator STATS: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.STATS."+coordinator.ServiceName, inbox, nil); err != nil {
		return nil, fmt.Errorf("bench: coordinator STATS: %w", err)
	}
	var out []coordinator.Stats
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return out, nil // the wait is over
		}
		if s, ok := opstatus.DecodeStats(m.Data, func(s *coordinator.Stats) bool { return s.Node != "" }); ok {
			out = append(out, s)
		}
	}
}

// leaseShares returns each lease partition of node's share of the
// requests its coordinator counted (stats of every coordinator, as
// fetchAllStats returns them) and the partitions' requests per round.
func leaseShares(stats []coordinator.Stats, node string, n int) (shares []float64, perRound float64) {
	reqs := make([]float64, n)
	var total, rounds float64
	for _, s := range stats {
		if s.Node == node && s.Partition >= 0 && s.Partition < n {
			reqs[s.Partition] = float64(s.Requests)
			total += float64(s.Requests)
			rounds += float64(s.Rounds)
		}
	}
	for p := range reqs {
		reqs[p] = safeDiv(reqs[p], total)
	}
	return reqs, safeDiv(total, rounds)
}

// partsInFlight is the intake bound of every coordinator of a load run
// with lease partitions: high enough that none refuses a request, so the
// single coordinator and the partitions are compared over the same work
// (a refusal costs far less than a grant).
const partsInFlight = 1 << 16

// intakeArgs are the coordinators' intake flags of the load run.
func (o *LoadOptions) intakeArgs() []string {
	if o.LeasePartitions <= 1 {
		return nil
	}
	return []string{"--max-in-flight", fmt.Sprint(partsInFlight)}
}
