// Package planet simulates a planet-scale three-level lease tree in
// virtual time over the pure ledgers (internal/ledger): a root, regions,
// clusters and the clients of each cluster, one FAIR_SHARE resource, WAN
// latencies between levels, refresh intervals that shrink by half per
// level away from the root (the ledger's own rule), a region cut off from
// the root for minutes, a root failover and demand waves.
//
// It does no I/O and reads no clock but to measure the root's CPU: the
// driver passes every ledger the virtual time, delivers each message after
// its link's latency, and commits lease records at once. What it reports
// (utilization, the most ever in force against the capacity, reconvergence
// per level, messages per level, the root's cost per round) is what the
// allocation rules and the protocol give at that size, without what a
// loaded machine or a network adds.
package planet

import (
	"errors"
	"fmt"
	"time"
)

// Config sizes a run. Short and Full give the two variants.
type Config struct {
	// Regions under the root, Clusters per region, Clients per cluster.
	Regions, Clusters, Clients int
	// Share is the capacity of the one resource per client (its mean fair
	// share): the capacity is Share × the number of clients. Units
	// matter to the agent's early refresh (a change of at least one).
	Share float64
	// Refresh is the template's refresh interval: how often regions ask
	// the root. Clusters ask their region twice as often and clients their
	// cluster four times as often (the ledger halves it per level).
	Refresh time.Duration
	// Lease is the lease length; FloorLease how long a floor (half the
	// fair share) lasts once a lease ends unrefreshed.
	Lease, FloorLease time.Duration
	// MinLatency and MaxLatency bound each WAN link's one-way latency
	// (cluster–region, region–root), drawn uniformly per link.
	MinLatency, MaxLatency time.Duration
	// Tick is the clusters' round interval: clients' requests are batched
	// into one round per tick.
	Tick time.Duration
	// Timeline: Warmup, then region 0 is cut off from the root for Cut;
	// AfterCut later the root's leader dies, a successor takes over from
	// the last committed record Outage later, and the run ends
	// AfterFailover after the takeover.
	Warmup, Cut, AfterCut, Outage, AfterFailover time.Duration
	// Sample is the interval of the measurements over every client.
	Sample time.Duration
	// Seed makes a run repeatable.
	Seed uint64
	// Workers run the clusters' rounds of one tick in parallel (the
	// clusters are independent within a tick). 0 means 1.
	Workers int
	// Progress, if set, is called after every minute of virtual time
	// with the virtual time done and the real time spent.
	Progress func(virtual, wall time.Duration) `json:"-"`
}

// Short is the variant a unit test runs: 2 regions × 10 clusters × 100
// clients, the full timeline.
func Short() Config {
	c := Full()
	c.Regions, c.Clusters, c.Clients = 2, 10, 100
	c.Sample = 200 * time.Millisecond
	return c
}

// Full is the planet: 10 regions × 100 clusters × 1,000 clients.
func Full() Config {
	return Config{Regions: 10, Clusters: 100, Clients: 1000, Share: 100,
		Refresh: 20 * time.Second, Lease: 60 * time.Second, FloorLease: 5 * time.Minute,
		MinLatency: 20 * time.Millisecond, MaxLatency: 200 * time.Millisecond, Tick: 20 * time.Millisecond,
		Warmup: 90 * time.Second, Cut: 10 * time.Minute, AfterCut: 90 * time.Second, Outage: 5 * time.Second,
		AfterFailover: 90 * time.Second, Sample: time.Second, Seed: 1}
}

// ErrOverGrant is returned (wrapped) when the clients of the tree ever hold
// more than the capacity at a sample.
var ErrOverGrant = errors.New("planet: clients hold more than the capacity")

func (c Config) check() error {
	switch {
	case c.Regions < 1 || c.Clusters < 1 || c.Clients < 1:
		return fmt.Errorf("planet: sizes %d×%d×%d: each must be at least 1", c.Regions, c.Clusters, c.Clients)
	case c.Share <= 0:
		return fmt.Errorf("planet: share %v: must be positive", c.Share)
	case c.Tick <= 0 || c.Sample < c.Tick:
		return fmt.Errorf("planet: tick %v and sample %v: want 0 < tick ≤ sample", c.Tick, c.Sample)
	case c.MinLatency <= 0 || c.MaxLatency < c.MinLatency:
		return fmt.Errorf("planet: latencies %v–%v: want 0 < min ≤ max", c.MinLatency, c.MaxLatency)
	case c.Refresh <= 0 || c.Lease < c.Refresh || c.FloorLease <= 0:
		return fmt.Errorf("planet: refresh %v, lease %v, floor lease %v: want 0 < refresh ≤ lease and a floor lease", c.Refresh, c.Lease, c.FloorLease)
	case c.Warmup <= 0 || c.Cut <= 0 || c.AfterCut <= 0 || c.Outage <= 0 || c.AfterFailover <= 0:
		return errors.New("planet: every phase of the timeline must be positive")
	}
	return nil
}

// Capacity is the resource's capacity.
func (c Config) Capacity() float64 {
	return c.Share * float64(c.Regions*c.Clusters*c.Clients)
}

// Duration is the virtual time the run covers.
func (c Config) Duration() time.Duration {
	return c.Warmup + c.Cut + c.AfterCut + c.Outage + c.AfterFailover
}

// Result is what a run measured. Shares and sums are fractions of the
// capacity unless said otherwise.
type Result struct {
	Config Config `json:"config"`
	// ClientsTotal counts the clients in all; WallSeconds is how long the
	// run took in real time.
	ClientsTotal int     `json:"clients_total"`
	WallSeconds  float64 `json:"wall_seconds"`
	// MaxInForce is the most Σ in force (leases, or floors after them)
	// over all clients ever was at a sample, ÷ capacity: at most 1.
	MaxInForce float64 `json:"max_in_force"`
	// OverGrants counts samples above the capacity (0, or the run fails).
	OverGrants int `json:"over_grants"`
	// Utilization: the mean over samples from a third of the warm-up on
	// (the tree has filled by then), outside the cut, of Σ in force ÷
	// min(capacity, Σ wants) (each sample capped at 1), and its lowest
	// sample; Useful counts only what clients want (Σ min(in force,
	// wants)). The Cut fields are the same means during the cut.
	Utilization    float64 `json:"utilization"`
	UtilizationMin float64 `json:"utilization_min"`
	Useful         float64 `json:"useful"`
	UtilizationCut float64 `json:"utilization_during_cut"`
	UsefulCut      float64 `json:"useful_during_cut"`
	// CutLowest is the cut region's lowest coverage per level during the
	// cut (its subtree runs on its lease, then its floor, then nothing).
	CutLowest [3]float64 `json:"cut_region_lowest_coverage"`
	// Events: the cut's end and the root's takeover, with the
	// reconvergence per level after each.
	Events []Event `json:"events"`
	// Levels: messages and nodes per level (root → regions, regions →
	// clusters, clusters → clients).
	Levels [3]Level `json:"levels"`
	// Root is the root ledger's cost.
	Root RootCost `json:"root"`
	// Series is every fifth second's sample (or every sample, when they
	// are further apart), for plotting.
	Series []Sample `json:"series"`
}

// Event is one mishap and how each level came back from it.
type Event struct {
	Name string  `json:"name"`
	At   float64 `json:"at_s"`
	// Scope says whose coverage the reconvergence watches: the cut
	// region's subtree or the whole tree.
	Scope string `json:"scope"`
	// Before is each level's coverage (Σ min(held, fair share) ÷ Σ fair
	// share) at the sample before the event; Lowest the least after it;
	// Reconverged the seconds after the event until the coverage is at
	// least Threshold (per level; see the constant Threshold; -1: not
	// within the run).
	// Outage is how long nobody led (the failover).
	Outage      float64    `json:"outage_s,omitempty"`
	Before      [3]float64 `json:"before"`
	Lowest      [3]float64 `json:"lowest"`
	Reconverged [3]float64 `json:"reconverged_s"`
	Threshold   [3]float64 `json:"threshold"`
}

// Level is one level's traffic: requests (each answered once) per second
// of virtual time in all and per serving node.
type Level struct {
	Name        string  `json:"name"`
	Servers     int     `json:"servers"`
	Claimants   int     `json:"claimants_per_server"`
	Requests    int64   `json:"requests"`
	PerSecond   float64 `json:"requests_per_s"`
	PerServer   float64 `json:"requests_per_s_per_server"`
	RefreshEach float64 `json:"refresh_s"`
	// Confirms and Inherited count the requests answered with the
	// shortest refresh (clients → cluster only): Confirms those whose
	// grant shrank (asked back at once to confirm it), Inherited those
	// whose cluster had itself been asked back at once by its region and
	// passed that interval, halved, on to its clients.
	Confirms  int64 `json:"confirms,omitempty"`
	Inherited int64 `json:"inherited,omitempty"`
}

// RootCost is the wall time of the root's ledger calls per round (one
// child's request: ServerGet, Propose, Allocate, the lease, EndRound).
type RootCost struct {
	Rounds    int     `json:"rounds"`
	MeanMicro float64 `json:"mean_us"`
	P50Micro  float64 `json:"p50_us"`
	P99Micro  float64 `json:"p99_us"`
	MaxMicro  float64 `json:"max_us"`
	// Busy is the root's ledger time (rounds and sweeps) ÷ virtual time.
	Busy float64 `json:"busy"`
}

// Sample is one measurement over all clients, at T seconds of virtual
// time: Σ wants and Σ in force ÷ capacity, the utilization and its useful
// part (see Result), and each level's coverage of its fair shares over the
// whole tree and over the cut region's subtree (see Event).
type Sample struct {
	T           float64    `json:"t_s"`
	Demand      float64    `json:"demand"`
	InForce     float64    `json:"in_force"`
	Utilization float64    `json:"utilization"`
	Useful      float64    `json:"useful"`
	Coverage    [3]float64 `json:"coverage"`
	CutCoverage [3]float64 `json:"cut_coverage"`
}
