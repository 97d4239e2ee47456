package metrics

import (
	"strconv"

	"github.com/allot/allot/status"
	"github.com/prometheus/client_golang/prometheus"
)

// NewDomainCollector returns a collector of the domain-limit partitions
// that stats returns at each scrape: the STATS of the servers this process
// leads now (domainserver.Replica.Server().Stats()). Labels are the node
// and the partition number: resources, domains and client ids never
// become labels.
func NewDomainCollector(stats func() []status.Domain) prometheus.Collector {
	return domainCollector{stats}
}

type domainCollector struct{ stats func() []status.Domain }

var (
	domainLabels = []string{"node", "partition"}

	domainLearning  = desc("allot_domain_learning", "1 while the partition's new leader learns the live holds from refreshes (it grants no copies).", domainLabels...)
	domainResources = desc("allot_domain_resources", "Resources with state in the leader's memory.", domainLabels...)
	domainHolds     = desc("allot_domain_holds", "Live holds of copy-limited resources.", domainLabels...)
	domainCopies    = desc("allot_domain_copies_held", "Copies held by live holds and staged transfers.", domainLabels...)
	domainTransfers = desc("allot_domain_transfers", "Staged transfers not yet seized or expired.", domainLabels...)

	domainCounters = []struct {
		d *prometheus.Desc
		v func(status.DomainCounts) uint64
	}{
		{desc("allot_domain_requests_total", "Requests on rate-limited resources decided.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Requests }},
		{desc("allot_domain_requests_rejected_total", "Requests granted nothing.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Rejected }},
		{desc("allot_domain_hits_granted_total", "Hits granted by requests.", domainLabels...), func(c status.DomainCounts) uint64 { return c.HitsGranted }},
		{desc("allot_domain_reserves_total", "Reserves of copy-limited resources.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Reserves }},
		{desc("allot_domain_reserves_refused_total", "Reserves granted nothing by the limits.", domainLabels...), func(c status.DomainCounts) uint64 { return c.ReservesRefused }},
		{desc("allot_domain_learning_refusals_total", "Reserves answered 'learning' by a new leader.", domainLabels...), func(c status.DomainCounts) uint64 { return c.LearningRefusals }},
		{desc("allot_domain_copies_granted_total", "Copies granted by reserves.", domainLabels...), func(c status.DomainCounts) uint64 { return c.CopiesGranted }},
		{desc("allot_domain_releases_total", "Releases applied.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Releases }},
		{desc("allot_domain_refreshes_total", "Hold refreshes.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Refreshes }},
		{desc("allot_domain_holds_restored_total", "Holds adopted from refreshes while learning.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Restored }},
		{desc("allot_domain_holds_unsealed_total", "Holds a new leader refused to adopt for want of a valid seal (claimed copies never granted, or a seal too old).", domainLabels...), func(c status.DomainCounts) uint64 { return c.Unsealed }},
		{desc("allot_domain_holds_lost_total", "Holds a refresh listed that the server no longer had.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Lost }},
		{desc("allot_domain_holds_expired_total", "Holds released because their client stopped refreshing them.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Expired }},
		{desc("allot_domain_transfers_total", "Transfers staged.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Transfers }},
		{desc("allot_domain_seized_total", "Transfers seized.", domainLabels...), func(c status.DomainCounts) uint64 { return c.Seized }},
		{desc("allot_domain_transfers_expired_total", "Staged transfers released unseized after their ttl.", domainLabels...), func(c status.DomainCounts) uint64 { return c.TransfersExpired }},
		{desc("allot_domain_errors_total", "Error replies (bad input, unknown resource or hold, ...).", domainLabels...), func(c status.DomainCounts) uint64 { return c.Errors }},
	}
)

func (domainCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{domainLearning, domainResources, domainHolds, domainCopies, domainTransfers} {
		ch <- d
	}
	for _, c := range domainCounters {
		ch <- c.d
	}
}

func (c domainCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.stats() {
		l := []string{st.Node, strconv.Itoa(st.Partition)}
		gauge(ch, domainLearning, b2f(st.Learning), l...)
		gauge(ch, domainResources, float64(st.Resources), l...)
		gauge(ch, domainHolds, float64(st.Holds), l...)
		gauge(ch, domainCopies, float64(st.CopiesHeld), l...)
		gauge(ch, domainTransfers, float64(st.Transfers), l...)
		for _, k := range domainCounters {
			counter(ch, k.d, k.v(st.DomainCounts), l...)
		}
	}
}
