// Package agentmetrics exposes an allot agent, and its domain-limit
// client, to Prometheus.
//
// A service registers the collectors in its own registry:
//
//	a, _ := agent.New(nc)
//	prometheus.MustRegister(agentmetrics.New(a))
//	d, _ := domain.New(a)
//	prometheus.MustRegister(agentmetrics.NewDomain(d))
//
// Per resource the agent opened New reports the capacity in force, the
// lease granted, the wants, what the limiter admitted and refused, and
// the time spent without a lease (on the failure mode's capacity), and in
// shadow mode what the grant would have refused. Per domain-limited
// resource NewDomain reports its calls, grants, rejections, retries,
// fail-open grants and held copies.
// Resources are the ones the service names in code; client ids never
// become labels. docs/metrics.md lists every metric.
package agentmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot/allot/agent"
)

// New returns a collector of a's resources, read at each scrape.
func New(a *agent.Agent) prometheus.Collector { return collector{a} }

type collector struct{ a *agent.Agent }

var (
	labels = []string{"resource", "kind"}

	descCapacity = prometheus.NewDesc("allot_agent_capacity",
		"Capacity in force: per second for rate resources, units in flight for gauges; +Inf when unlimited.", labels, nil)
	descGranted = prometheus.NewDesc("allot_agent_granted",
		"Capacity of the lease held from the coordinator; 0 without a lease.", labels, nil)
	descLeased = prometheus.NewDesc("allot_agent_leased",
		"1 while a valid lease is held, 0 while the agent runs on its failure mode's capacity.", labels, nil)
	descWants = prometheus.NewDesc("allot_agent_wants",
		"Capacity asked for (explicit, or estimated from demand).", labels, nil)
	descAdmitted = prometheus.NewDesc("allot_agent_admitted_total",
		"Units the limiter let through: events of a rate resource, units of a gauge.", labels, nil)
	descRefused = prometheus.NewDesc("allot_agent_refused_total",
		"Units the limiter turned away (refused, reservation not OK, wait or acquire failed).", labels, nil)
	descFallback = prometheus.NewDesc("allot_agent_fallback_seconds_total",
		"Time the resource ran without a valid lease, on its failure mode's capacity.", labels, nil)
	descShadow = prometheus.NewDesc("allot_agent_shadow",
		"1 while the resource runs in shadow mode: the limiter enforces the wants, not the grant.", labels, nil)
	descShadowCapacity = prometheus.NewDesc("allot_agent_shadow_capacity",
		"In shadow mode, the capacity that would be in force (the grant, or the failure mode's); 0 otherwise.", labels, nil)
	descShadowAdmitted = prometheus.NewDesc("allot_agent_shadow_admitted_total",
		"Units admitted in shadow mode.", labels, nil)
	descWouldRefuse = prometheus.NewDesc("allot_agent_would_refuse_total",
		"Units admitted in shadow mode that the shadowed capacity would have refused or made wait.", labels, nil)
	descTerm = prometheus.NewDesc("allot_agent_coordinator_term",
		"Highest coordinator term the agent has seen.", nil, nil)
)

// Describe sends the descriptions of the agent's metrics.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCapacity, descGranted, descLeased, descWants, descAdmitted, descRefused, descFallback,
		descShadow, descShadowCapacity, descShadowAdmitted, descWouldRefuse, descTerm} {
		ch <- d
	}
}

// Collect sends the agent's metrics, read now.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.a.Usage() {
		l := []string{u.ResourceID, u.Kind.String()}
		leased := 0.0
		if u.Leased {
			leased = 1
		}
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, u.Capacity, l...)
		ch <- prometheus.MustNewConstMetric(descGranted, prometheus.GaugeValue, u.Granted, l...)
		ch <- prometheus.MustNewConstMetric(descLeased, prometheus.GaugeValue, leased, l...)
		ch <- prometheus.MustNewConstMetric(descWants, prometheus.GaugeValue, u.Wants, l...)
		ch <- prometheus.MustNewConstMetric(descAdmitted, prometheus.CounterValue, float64(u.Admitted), l...)
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(u.Refused), l...)
		ch <- prometheus.MustNewConstMetric(descFallback, prometheus.CounterValue, u.Fallback.Seconds(), l...)
		shadow := 0.0
		if u.Shadow {
			shadow = 1
		}
		ch <- prometheus.MustNewConstMetric(descShadow, prometheus.GaugeValue, shadow, l...)
		ch <- prometheus.MustNewConstMetric(descShadowCapacity, prometheus.GaugeValue, u.ShadowCapacity, l...)
		ch <- prometheus.MustNewConstMetric(descShadowAdmitted, prometheus.CounterValue, float64(u.ShadowAdmitted), l...)
		ch <- prometheus.MustNewConstMetric(descWouldRefuse, prometheus.CounterValue, float64(u.WouldRefuse), l...)
	}
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(c.a.Term()))
}
