package metrics

import (
	"slices"
	"strconv"

	"github.com/allot/allot/status"
	"github.com/prometheus/client_golang/prometheus"
)

// NewQuotaCollector returns a collector of the quota partitions that
// stats returns at each scrape: the STATS of the servers this process
// leads now (quotaserver.Replica.Server().Stats()). Labels are the node,
// the partition and, for the decisions, the namespace: namespaces are the
// operator's configuration, so their number is bounded; buckets and
// client ids never become labels.
func NewQuotaCollector(stats func() []status.Quota) prometheus.Collector {
	return quotaCollector{stats}
}

type quotaCollector struct{ stats func() []status.Quota }

var (
	quotaLabels   = []string{"node", "partition"}
	quotaNSLabels = []string{"node", "partition", "namespace"}

	quotaBuckets  = desc("allot_quota_buckets", "Buckets alive in the leader's memory.", quotaLabels...)
	quotaFull     = desc("allot_quota_buckets_start_full", "1 on a deployment's first leader (buckets start full); 0 after a failover (buckets start drained).", quotaLabels...)
	quotaCounters = []struct {
		d *prometheus.Desc
		v func(status.Quota) uint64
	}{
		{desc("allot_quota_takes_total", "Takes decided by the partition.", quotaLabels...), func(s status.Quota) uint64 { return s.Takes }},
		{desc("allot_quota_reports_total", "Reports applied by the partition.", quotaLabels...), func(s status.Quota) uint64 { return s.Reports }},
		{desc("allot_quota_forwarded_total", "Requests on the plain subjects passed on to the partition that owns their namespace.", quotaLabels...), func(s status.Quota) uint64 { return s.Forwarded }},
		{desc("allot_quota_silenced_total", "Replies withheld because the leadership may have lapsed.", quotaLabels...), func(s status.Quota) uint64 { return s.Silenced }},
		{desc("allot_quota_shadow_would_refuse_total", "Takes answered OK in shadow mode that the bucket refused or made wait.", quotaLabels...), func(s status.Quota) uint64 { return s.ShadowWouldRefuse }},
	}
	quotaNSCounters = []struct {
		d *prometheus.Desc
		v func(status.QuotaEvents) uint64
	}{
		{desc("allot_quota_served_total", "Takes answered OK.", quotaNSLabels...), func(e status.QuotaEvents) uint64 { return e.Served }},
		{desc("allot_quota_served_wait_total", "Takes answered OK_WAIT.", quotaNSLabels...), func(e status.QuotaEvents) uint64 { return e.ServedWait }},
		{desc("allot_quota_tokens_total", "Tokens admitted by takes.", quotaNSLabels...), func(e status.QuotaEvents) uint64 { return e.Tokens }},
		{desc("allot_quota_reported_tokens_total", "Tokens charged by reports.", quotaNSLabels...), func(e status.QuotaEvents) uint64 { return e.Reported }},
		{desc("allot_quota_dynamic_buckets_created_total", "Dynamic buckets created.", quotaNSLabels...), func(e status.QuotaEvents) uint64 { return e.DynamicCreated }},
		{desc("allot_quota_buckets_removed_total", "Buckets dropped by the sweeper or a configuration change.", quotaNSLabels...), func(e status.QuotaEvents) uint64 { return e.Removed }},
		{desc("allot_quota_soft_limit_total", "Decisions carrying the soft_limit warning.", quotaNSLabels...), func(e status.QuotaEvents) uint64 { return e.SoftLimit }},
	}
	// quotaRejected counts REJECTED takes by reason, the wire's reasons.
	quotaRejected = desc("allot_quota_rejected_total", "Takes answered REJECTED, by reason.", append(slices.Clone(quotaNSLabels), "reason")...)
	quotaReasons  = []struct {
		reason string
		v      func(status.QuotaEvents) uint64
	}{
		{"timeout", func(e status.QuotaEvents) uint64 { return e.Timeout }},
		{"no_wait", func(e status.QuotaEvents) uint64 { return e.NoWait }},
		{"too_many_tokens", func(e status.QuotaEvents) uint64 { return e.TooManyTokens }},
		{"no_bucket", func(e status.QuotaEvents) uint64 { return e.BucketMiss }},
		{"too_many_buckets", func(e status.QuotaEvents) uint64 { return e.TooManyBuckets }},
		{"banned", func(e status.QuotaEvents) uint64 { return e.Banned }},
		{"reserved", func(e status.QuotaEvents) uint64 { return e.Reserved }},
		{"bad_request", func(e status.QuotaEvents) uint64 { return e.BadRequest }},
	}
)

func (quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- quotaBuckets
	ch <- quotaFull
	ch <- quotaRejected
	for _, c := range quotaCounters {
		ch <- c.d
	}
	for _, c := range quotaNSCounters {
		ch <- c.d
	}
}

func (c quotaCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.stats() {
		l := []string{st.Node, strconv.Itoa(st.Partition)}
		gauge(ch, quotaBuckets, float64(st.Buckets), l...)
		gauge(ch, quotaFull, b2f(st.BucketsStartFull), l...)
		for _, k := range quotaCounters {
			counter(ch, k.d, k.v(st), l...)
		}
		for ns, ev := range st.Events {
			nl := append(slices.Clone(l), ns)
			for _, k := range quotaNSCounters {
				counter(ch, k.d, k.v(ev), nl...)
			}
			for _, r := range quotaReasons {
				counter(ch, quotaRejected, r.v(ev), append(slices.Clone(nl), r.reason)...)
			}
		}
	}
}
