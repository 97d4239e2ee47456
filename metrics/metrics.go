// Package metrics exposes allot coordinators to Prometheus.
//
// NewCoordinatorCollector returns a prometheus.Collector that reports, on
// every scrape, what the coordinators and replicas of a process observe:
// per node its election role and term, allocation rounds, requests and
// error replies, lease-record writes and configuration; per node and
// resource the capacity, what is leased out, what is wanted, the
// claimants and learning mode. docs/metrics.md lists every metric.
//
// Cardinality is bounded: client ids never become labels, subjects and
// codes are fixed sets, and each node reports at most MaxResources
// resources by name (those with the most outstanding); the others are
// summed under the resource label OtherResource.
//
// NewQuotaCollector, NewDomainCollector and NewEnvoyCollector do the same
// for the quota, domain-limit and Envoy counter partitions a process
// leads. The agent's collector is in package agent/agentmetrics.
package metrics

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/allot/allot/status"
	"github.com/prometheus/client_golang/prometheus"
)

// OtherResource is the resource label value of the sum over the
// resources not reported by name. A resource whose id is OtherResource
// is always counted in it.
const OtherResource = "_other"

// DefaultMaxResources is the default Options.MaxResources.
const DefaultMaxResources = 50

// Target is what a collector reports on: a *coordinator.Coordinator or a
// *coordinator.Replica.
type Target interface {
	Observe() status.Observation
}

// Options configure a coordinator collector.
type Options struct {
	// MaxResources bounds the resources each node reports by name.
	// Default DefaultMaxResources; at most
	// status.MaxObservedResources.
	MaxResources int
}

// NewCoordinatorCollector returns a collector of the targets that
// targets returns at each scrape (a process's replicas come and go). When
// two targets serve the same node, the one with the highest term is
// reported.
func NewCoordinatorCollector(targets func() []Target, opts Options) prometheus.Collector {
	n := opts.MaxResources
	if n <= 0 {
		n = DefaultMaxResources
	}
	return &collector{targets: targets, max: min(n, status.MaxObservedResources)}
}

type collector struct {
	targets func() []Target
	max     int
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	replicaLabels  = []string{"node", "partition", "server_id"}
	node           = []string{"node", "partition"}
	resourceLabels = []string{"node", "resource"}

	descLeader = desc("allot_coordinator_leader",
		"1 while this replica leads its node and its coordinator serves, else 0.", replicaLabels...)
	descTerm = desc("allot_coordinator_term",
		"Election term: the one served while leading, else the leader's last seen (0 unknown).", replicaLabels...)
	descConfigGen = desc("allot_config_generation",
		"Generation of the resource templates in force; it grows with every applied change.", replicaLabels...)
	descConfigRejected = desc("allot_config_rejected_puts_total",
		"Template revisions rejected as invalid since the replica started; the last valid revision keeps serving.", replicaLabels...)
	descConfigLoaded = desc("allot_config_loaded",
		"1 once the templates were read from the configuration bucket.", replicaLabels...)

	descRounds = desc("allot_coordinator_rounds_total", "Allocation rounds run.", node...)
	descRound  = desc("allot_coordinator_round_duration_seconds",
		"Time one allocation round takes to apply its requests, allocate and answer.", node...)
	descRequests = desc("allot_coordinator_requests_total",
		"Requests received, by endpoint subject (capacity.get, capacity.release, server.get, other).", "node", "partition", "subject")
	descErrors = desc("allot_coordinator_errors_total",
		"Error replies sent, by endpoint subject and code (400, 404, 413, 429, 500, 501, 503 or other).", "node", "partition", "subject", "code")
	descWrites = desc("allot_coordinator_record_writes_total",
		"Lease-record writes committed to the state bucket.", node...)
	descWriteErrors = desc("allot_coordinator_record_write_errors_total",
		"Lease-record writes that failed; grants are held to the recorded ceilings meanwhile.", node...)
	descWaits = desc("allot_coordinator_record_waits_total",
		"Resource rounds whose grants waited for a lease-record write.", node...)
	descCut = desc("allot_coordinator_cut_leases_total",
		"Leases cut short to the lease record (zero-length ones included): its writes were too slow or failed.", node...)
	descForeign = desc("allot_coordinator_foreign_records_total",
		"Stored lease records found not to be this coordinator's while serving (each was written again).", node...)
	descForged = desc("allot_coordinator_forged_records_total",
		"Lease records ignored at takeover because their term is above any the election issued.", node...)
	descSilenced = desc("allot_coordinator_silenced_replies_total",
		"Replies withheld because the coordinator could no longer answer (stopped, deposed, leadership lapsed).", node...)
	descResources = desc("allot_coordinator_resources",
		"Resources the node keeps state for.", node...)
	descClients = desc("allot_coordinator_client_records",
		"Client records the node keeps (one per client and resource).", node...)
	descOthers = desc("allot_coordinator_other_resources",
		"Resources summed under resource=\""+OtherResource+"\" instead of being reported by name.", "node")

	descCapacity = desc("allot_resource_capacity",
		"Capacity the node divides: the template's, or on a child node its lease from the parent.", resourceLabels...)
	descOutstanding = desc("allot_resource_outstanding",
		"Capacity leased out: the bound on what the claimants hold (sum of has).", resourceLabels...)
	descWants = desc("allot_resource_wants",
		"Capacity the claimants ask for (sum of wants).", resourceLabels...)
	descClaimants = desc("allot_resource_claimants",
		"Client records of the resource (a child node counts once per priority band).", resourceLabels...)
	descLearning = desc("allot_resource_learning",
		"1 while the resource is in learning mode after a takeover (grants echo what clients hold); for "+OtherResource+", the number of such resources.", resourceLabels...)
	descShadow = desc("allot_resource_shadow",
		"1 while the resource is in shadow mode (agents admit their wants and count what the grant would refuse); for "+OtherResource+", the number of such resources.", resourceLabels...)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descTerm, descConfigGen, descConfigRejected, descConfigLoaded,
		descRounds, descRound, descRequests, descErrors, descWrites, descWriteErrors, descWaits, descCut, descForeign, descForged,
		descSilenced, descResources, descClients, descOthers,
		descCapacity, descOutstanding, descWants, descClaimants, descLearning, descShadow} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	var obs []status.Observation
	for _, t := range c.targets() {
		obs = append(obs, t.Observe())
	}
	// Replica metrics for every replica, once per (node, partition,
	// server id).
	type replicaKey struct {
		node, server string
		partition    int
	}
	seen := map[replicaKey]bool{}
	for _, o := range obs {
		k := replicaKey{o.Node, o.ServerID, o.Partition}
		if seen[k] {
			continue
		}
		seen[k] = true
		lead := 0.0
		if o.Role == status.RoleLeader && o.Serving {
			lead = 1
		}
		p := strconv.Itoa(o.Partition)
		gauge(ch, descLeader, lead, o.Node, p, o.ServerID)
		gauge(ch, descTerm, float64(o.Term), o.Node, p, o.ServerID)
		gauge(ch, descConfigGen, float64(o.ConfigGeneration), o.Node, p, o.ServerID)
		counter(ch, descConfigRejected, o.ConfigRejected, o.Node, p, o.ServerID)
		gauge(ch, descConfigLoaded, b2f(o.ConfigLoaded), o.Node, p, o.ServerID)
	}
	// Coordinator metrics for the highest term serving each partition of
	// each node; a node's resources are reported together, since each
	// belongs to one partition.
	type partKey struct {
		node      string
		partition int
	}
	best := map[partKey]status.Observation{}
	for _, o := range obs {
		k := partKey{o.Node, o.Partition}
		if b, ok := best[k]; o.Coordinator && (!ok || o.Term > b.Term) {
			best[k] = o
		}
	}
	byNode := map[string][]status.Observation{}
	for _, o := range best {
		c.collectCoordinator(ch, o)
		byNode[o.Node] = append(byNode[o.Node], o)
	}
	for n, os := range byNode {
		c.collectResources(ch, n, os)
	}
}

func (c *collector) collectCoordinator(ch chan<- prometheus.Metric, o status.Observation) {
	n, p := o.Node, strconv.Itoa(o.Partition)
	counter(ch, descRounds, o.Rounds, n, p)
	h := o.RoundSeconds
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Counts[i]
	}
	ch <- prometheus.MustNewConstHistogram(descRound, h.Count, h.Sum, buckets, n, p)
	for _, call := range o.Calls {
		if call.Code == 0 {
			counter(ch, descRequests, call.N, n, p, call.Subject)
		} else {
			counter(ch, descErrors, call.N, n, p, call.Subject, status.CodeLabel(call.Code))
		}
	}
	counter(ch, descWrites, o.RecordWrites, n, p)
	counter(ch, descWriteErrors, o.RecordErrors, n, p)
	counter(ch, descWaits, o.RecordWaits, n, p)
	counter(ch, descCut, o.CutLeases, n, p)
	counter(ch, descForeign, o.ForeignRecords, n, p)
	counter(ch, descForged, o.ForgedRecords, n, p)
	counter(ch, descSilenced, o.Silenced, n, p)
	gauge(ch, descResources, float64(o.Resources), n, p)
	gauge(ch, descClients, float64(o.Clients), n, p)
}

// collectResources reports the resources of node n's serving partitions
// os.
func (c *collector) collectResources(ch chan<- prometheus.Metric, n string, os []status.Observation) {
	named, other := c.fold(os)
	gauge(ch, descOthers, float64(other.Count), n)
	for _, g := range named {
		resourceGauges(ch, n, g.ID, g.Capacity, g.Outstanding, g.Wants, g.Claimants, b2f(g.Learning), b2f(g.Shadow))
	}
	resourceGauges(ch, n, OtherResource, other.Capacity, other.Outstanding, other.Wants, other.Claimants, float64(other.Learning), float64(other.Shadow))
}

// fold keeps the first c.max resources of os (most outstanding first) by
// name, except one named OtherResource, and sums the rest.
func (c *collector) fold(os []status.Observation) (named []status.ResourceGauge, other status.ResourceTotals) {
	var top []status.ResourceGauge
	for _, o := range os {
		top = append(top, o.Top...)
		t := o.Other
		other.Count += t.Count
		other.Learning += t.Learning
		other.Shadow += t.Shadow
		other.Capacity += t.Capacity
		other.Outstanding += t.Outstanding
		other.Wants += t.Wants
		other.Claimants += t.Claimants
	}
	slices.SortStableFunc(top, func(a, b status.ResourceGauge) int { return cmp.Compare(b.Outstanding, a.Outstanding) })
	for _, g := range top {
		if len(named) < c.max && g.ID != OtherResource {
			named = append(named, g)
			continue
		}
		other.Add(g)
	}
	return named, other
}

func resourceGauges(ch chan<- prometheus.Metric, node, id string, capacity, outstanding, wants float64, claimants int, learning, shadow float64) {
	gauge(ch, descCapacity, capacity, node, id)
	gauge(ch, descOutstanding, outstanding, node, id)
	gauge(ch, descWants, wants, node, id)
	gauge(ch, descClaimants, float64(claimants), node, id)
	gauge(ch, descLearning, learning, node, id)
	gauge(ch, descShadow, shadow, node, id)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
