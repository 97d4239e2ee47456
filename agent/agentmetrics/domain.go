package agentmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot/allot/agent/domain"
)

// NewDomain returns a collector of d's domain-limit calls and holds, read
// at each scrape.
func NewDomain(d *domain.Client) prometheus.Collector { return domainCollector{d} }

type domainCollector struct{ d *domain.Client }

var (
	domainLabels = []string{"resource"}

	descDomainCalls = prometheus.NewDesc("allot_agent_domain_calls_total",
		"Domain-limit calls (Request, Reserve, Seize) per resource.", domainLabels, nil)
	descDomainGranted = prometheus.NewDesc("allot_agent_domain_granted_total",
		"Domain-limit calls the service granted.", domainLabels, nil)
	descDomainRejected = prometheus.NewDesc("allot_agent_domain_rejected_total",
		"Domain-limit calls that returned a rejection (after any retries).", domainLabels, nil)
	descDomainRetries = prometheus.NewDesc("allot_agent_domain_retries_total",
		"Attempts after a rejection (WithMaxWait's backoff).", domainLabels, nil)
	descDomainDegraded = prometheus.NewDesc("allot_agent_domain_degraded_total",
		"Calls granted by the agent itself, min_copies, because no domain service answered (fail-open).", domainLabels, nil)
	descDomainDegradedRefused = prometheus.NewDesc("allot_agent_domain_degraded_refused_total",
		"Calls refused because no domain service answered and the namespace's fail mode, the client's share or the lack of either forbade a local grant.", domainLabels, nil)
	descDomainWouldReject = prometheus.NewDesc("allot_agent_domain_would_reject_total",
		"Rejections the kill switch turned into grants.", domainLabels, nil)
	descDomainHeld = prometheus.NewDesc("allot_agent_domain_held_copies",
		"Copies of open holds the service knows of.", domainLabels, nil)
	descDomainLocal = prometheus.NewDesc("allot_agent_domain_local_copies",
		"Copies of open holds only this agent knows of (degraded or kill-switch holds).", domainLabels, nil)
	descDomainLost = prometheus.NewDesc("allot_agent_domain_lost_total",
		"Holds the service no longer had when refreshed (they expired unrefreshed).", domainLabels, nil)
)

// Describe sends the descriptions of the domain-limit metrics.
func (domainCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDomainCalls, descDomainGranted, descDomainRejected, descDomainRetries,
		descDomainDegraded, descDomainDegradedRefused, descDomainWouldReject, descDomainHeld, descDomainLocal, descDomainLost} {
		ch <- d
	}
}

// Collect sends the domain-limit metrics, read now.
func (c domainCollector) Collect(ch chan<- prometheus.Metric) {
	// Resources come from configuration, and the client counts those
	// beyond its first 1024 under "*": the label stays bounded.
	for _, st := range c.d.Status() {
		counter := func(desc *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), st.Resource)
		}
		counter(descDomainCalls, st.Calls)
		counter(descDomainGranted, st.Granted)
		counter(descDomainRejected, st.Rejected)
		counter(descDomainRetries, st.Retries)
		counter(descDomainDegraded, st.Degraded)
		counter(descDomainDegradedRefused, st.DegradedRefused)
		counter(descDomainWouldReject, st.WouldReject)
		counter(descDomainLost, st.Lost)
		ch <- prometheus.MustNewConstMetric(descDomainHeld, prometheus.GaugeValue, float64(st.HeldCopies), st.Resource)
		ch <- prometheus.MustNewConstMetric(descDomainLocal, prometheus.GaugeValue, float64(st.LocalCopies), st.Resource)
	}
}
