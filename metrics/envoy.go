package metrics

import (
	"strconv"

	"github.com/allot/allot/status"
	"github.com/prometheus/client_golang/prometheus"
)

// NewEnvoyCollector returns a collector of the Envoy rate limit counter
// partitions that stats returns at each scrape: the STATS data (the
// allot-envoy service's) of the partitions this process leads now. Labels
// are the node and the partition: domains, descriptors and keys never
// become labels.
func NewEnvoyCollector(stats func() []status.Envoy) prometheus.Collector {
	return envoyCollector{stats}
}

type envoyCollector struct{ stats func() []status.Envoy }

var (
	envoyLabels = []string{"node", "partition"}

	envoyCounters    = desc("allot_envoy_counters", "Window counters the partition keeps (expired ones until swept).", envoyLabels...)
	envoyMaxCounters = desc("allot_envoy_counters_max", "The most window counters the partition keeps; requests that would add more are refused.", envoyLabels...)
	envoyTotals      = []struct {
		d *prometheus.Desc
		v func(status.Envoy) uint64
	}{
		{desc("allot_envoy_count_requests_total", "Count requests received over NATS.", envoyLabels...), func(s status.Envoy) uint64 { return s.Requests }},
		{desc("allot_envoy_count_local_total", "Count requests of front ends in this process.", envoyLabels...), func(s status.Envoy) uint64 { return s.Local }},
		{desc("allot_envoy_hits_total", "Hits added to the counters.", envoyLabels...), func(s status.Envoy) uint64 { return s.Hits }},
		{desc("allot_envoy_full_total", "Count requests refused because the partition keeps its most counters.", envoyLabels...), func(s status.Envoy) uint64 { return s.Full }},
		{desc("allot_envoy_overflows_total", "Count requests refused because a counter would pass 2^63-1.", envoyLabels...), func(s status.Envoy) uint64 { return s.Overflows }},
		{desc("allot_envoy_silenced_total", "Replies withheld because the leadership may have lapsed.", envoyLabels...), func(s status.Envoy) uint64 { return s.Silenced }},
	}
)

func (envoyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- envoyCounters
	ch <- envoyMaxCounters
	for _, c := range envoyTotals {
		ch <- c.d
	}
}

func (c envoyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.stats() {
		l := []string{st.Node, strconv.Itoa(st.Partition)}
		gauge(ch, envoyCounters, float64(st.Counters), l...)
		gauge(ch, envoyMaxCounters, float64(st.MaxCounters), l...)
		for _, k := range envoyTotals {
			counter(ch, k.d, k.v(st), l...)
		}
	}
}
